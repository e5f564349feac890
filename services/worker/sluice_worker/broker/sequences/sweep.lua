-- Let go of this worker's sequences that closed (ended, idle past sequenceMaxIdleMSec or past
-- sequenceTimeoutMSec) with no job left, and of those another worker holds now. Their hashes stay
-- until they expire, so a late request is told the sequence was closed.
-- KEYS[1] this worker's held set, KEYS[2] live sequences. ARGV[1] the version's key prefix,
-- ARGV[2] this worker, ARGV[3] idle ms. Returns the sequence ids let go.
local prefix, me, idle_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local released = {}
for _, sid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local hash, jobs = prefix .. ':sequence:' .. sid, prefix .. ':sequence-jobs:' .. sid
  local f = redis.call('HMGET', hash, 'holder', 'ended', 'last_ms', 'deadline_ms')
  local deadline = tonumber(f[4] or 0)
  local closed = f[2] == '1' or now - tonumber(f[3] or 0) > idle_ms or (deadline > 0 and now > deadline)
  if f[1] ~= me then
    redis.call('SREM', KEYS[1], sid)
    released[#released + 1] = sid
  elseif closed and redis.call('XLEN', jobs) == 0 then
    redis.call('DEL', jobs)
    redis.call('SREM', KEYS[1], sid)
    redis.call('ZREM', KEYS[2], sid)
    redis.call('HDEL', hash, 'state')
    released[#released + 1] = sid
  end
end
return released
