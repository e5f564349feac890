-- Admit one job of a stateful model's sequence, atomically (every key shares the version's hash tag;
-- the holder's keys are derived here from ARGV[1], the tag prefix, since no caller can know them).
-- KEYS[1] version config hash, KEYS[2] workers hash, KEYS[3] the sequence's hash,
-- KEYS[4] the sequence's job stream, KEYS[5] live sequences (zset), KEYS[6] holders (set)
-- ARGV[1] key prefix of the version ("sluice:{m:v}"), ARGV[2] the encoded Job, ARGV[3] sequence id,
-- ARGV[4] start: "1" starts the sequence (again), "0" joins it, "" starts it unless it was closed,
-- ARGV[5] end ("1": this job ends it), ARGV[6] idle ms, ARGV[7] longest life ms (0: none),
-- ARGV[8] live sequences allowed, ARGV[9] jobs one sequence may hold, ARGV[10] how long a closed
-- sequence is remembered (ms), ARGV[11] the registry events channel
-- Returns the new entry id, COLD (no worker holds the sequence yet; the manager is asked for one),
-- or NOT_FOUND / NO_WORKER / CLOSED (ended, idle or timed out) / START_REQUIRED / LIMIT.
local prefix, job, sid, start, ending = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local idle_ms, life_ms, max_live = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local max_jobs, remember_ms = tonumber(ARGV[9]), tonumber(ARGV[10])
if redis.call('HGET', KEYS[1], 'state') ~= 'active' then
  return 'NOT_FOUND'
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function live()
  if redis.call('EXISTS', KEYS[3]) == 0 then return false end
  local fields = redis.call('HMGET', KEYS[3], 'ended', 'last_ms', 'deadline_ms')
  if fields[1] == '1' then return false end
  if now - tonumber(fields[2] or 0) > idle_ms then return false end
  local deadline = tonumber(fields[3] or 0)
  return deadline == 0 or now <= deadline
end

-- The live, READY worker holding the fewest sequences; '' when there is none.
local function choose_holder()
  local best, fewest = '', nil
  local workers = redis.call('HGETALL', KEYS[2])
  for i = 1, #workers, 2 do
    local id = workers[i]
    if string.find(workers[i + 1], '"READY"', 1, true)
        and redis.call('EXISTS', prefix .. ':hb:' .. id) == 1 then
      local held = redis.call('SCARD', prefix .. ':held:' .. id)
      if fewest == nil or held < fewest then best, fewest = id, held end
    end
  end
  return best
end

local cold = false
if not live() then
  local known = redis.call('EXISTS', KEYS[3]) == 1
  if start == '0' or (start == '' and known) then
    if known then return 'CLOSED' end
    return 'START_REQUIRED'
  end
  -- Closed, but its last jobs still wait for its holder: a new start must wait for them.
  if redis.call('XLEN', KEYS[4]) > 0 then
    return 'CLOSED'
  end
  -- A new sequence (or a new start of a closed one): a holder, and room for it.
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  if redis.call('ZSCORE', KEYS[5], sid) == false and redis.call('ZCARD', KEYS[5]) >= max_live then
    return 'LIMIT'
  end
  local old = redis.call('HGET', KEYS[3], 'holder')
  if old then redis.call('SREM', prefix .. ':held:' .. old, sid) end
  local holder = choose_holder()
  if holder == '' then
    if redis.call('HGET', KEYS[1], 'scale_from_zero') ~= '1' then
      return 'NO_WORKER'
    end
    cold = true
  end
  redis.call('DEL', KEYS[3], KEYS[4])
  redis.call('HSET', KEYS[3], 'holder', holder, 'served', 0, 'started_ms', now,
    'deadline_ms', life_ms > 0 and now + life_ms or 0)
  redis.call('SADD', prefix .. ':held:' .. holder, sid)
  redis.call('SADD', KEYS[6], holder)
  -- Wakes the holder (or, for '', every worker of the version: the first to take it holds it).
  redis.call('XADD', prefix .. ':inbox:' .. holder, 'MAXLEN', '~', 1000, '*', 's', sid)
elseif start == '1' then
  -- A new start of a live sequence: same holder, its saved state and counters cleared.
  redis.call('HDEL', KEYS[3], 'state', 'lost', 'ended')
  redis.call('HSET', KEYS[3], 'served', 0, 'started_ms', now)
end
-- The sequence's jobs beside the one running (XLEN counts it) are bounded.
if redis.call('XLEN', KEYS[4]) > max_jobs then
  return 'LIMIT'
end
local id = redis.call('XADD', KEYS[4], '*', 'm', job)
redis.call('HSET', KEYS[3], 'last_ms', now)
if ending == '1' then redis.call('HSET', KEYS[3], 'ended', '1') end
redis.call('PEXPIRE', KEYS[3], idle_ms + remember_ms)
redis.call('ZADD', KEYS[5], now + idle_ms, sid)
if cold then
  redis.call('PUBLISH', ARGV[11], '{"kind": "demand", "stream": "' .. KEYS[4] .. '"}')
  return 'COLD'
end
return id
