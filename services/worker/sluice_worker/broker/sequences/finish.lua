-- A job of a sequence is answered (its replies went out first, in the same write): remove it from
-- the sequence's stream, record the sequence's new state, and close the sequence when it ended.
-- KEYS[1] the sequence's hash, KEYS[2] its job stream, KEYS[3] live sequences, KEYS[4] this worker's
-- held set. ARGV[1] this worker, ARGV[2] the job's entry id, ARGV[3] the sequence id, ARGV[4] state
-- change ('' none, 'save', 'forget', 'lose'), ARGV[5] the state saved, ARGV[6] idle ms,
-- ARGV[7] how long a closed sequence is remembered (ms).
-- Returns OPEN, CLOSED (it ended: the worker forgets it) or MOVED (another worker holds it now;
-- nothing is done: that worker runs the job again).
local me, entry, sid, change = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local idle_ms, remember_ms = tonumber(ARGV[6]), tonumber(ARGV[7])
if redis.call('HGET', KEYS[1], 'holder') ~= me then
  return 'MOVED'
end
redis.call('XDEL', KEYS[2], entry)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HINCRBY', KEYS[1], 'served', 1)
redis.call('HSET', KEYS[1], 'last_ms', now)
if change == 'save' then
  redis.call('HSET', KEYS[1], 'state', ARGV[5])
elseif change == 'forget' then
  redis.call('HDEL', KEYS[1], 'state')
elseif change == 'lose' then
  redis.call('HDEL', KEYS[1], 'state')
  redis.call('HSET', KEYS[1], 'lost', '1')
end
if redis.call('HGET', KEYS[1], 'ended') == '1' and redis.call('XLEN', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[2])
  redis.call('SREM', KEYS[4], sid)
  redis.call('ZREM', KEYS[3], sid)
  redis.call('HDEL', KEYS[1], 'state')
  redis.call('PEXPIRE', KEYS[1], remember_ms)
  return 'CLOSED'
end
redis.call('PEXPIRE', KEYS[1], idle_ms + remember_ms)
redis.call('ZADD', KEYS[3], now + idle_ms, sid)
return 'OPEN'
