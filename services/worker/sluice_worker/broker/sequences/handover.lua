-- A stopping worker hands its sequences over: no holder (''), announced to every worker of the
-- version on the unassigned inbox; the first to take one over holds it (takeover.lua).
-- KEYS[1] this worker's held set, KEYS[2] the unassigned held set, KEYS[3] the holders set,
-- KEYS[4] the unassigned inbox. ARGV[1] the version's key prefix, ARGV[2] this worker.
-- Returns how many sequences were handed over.
local prefix, me = ARGV[1], ARGV[2]
local count = 0
for _, sid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local hash = prefix .. ':sequence:' .. sid
  if redis.call('HGET', hash, 'holder') == me then
    redis.call('HSET', hash, 'holder', '')
    redis.call('SADD', KEYS[2], sid)
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', 1000, '*', 's', sid)
    count = count + 1
  end
end
redis.call('DEL', KEYS[1])
redis.call('SADD', KEYS[3], '')
redis.call('SREM', KEYS[3], me)
return count
