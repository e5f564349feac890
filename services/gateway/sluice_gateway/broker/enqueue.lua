-- Admit one job to a model version's job stream, atomically (all keys share the version's hash tag).
-- KEYS[1] version config hash, KEYS[2] workers hash, KEYS[3] job stream
-- ARGV[1] the encoded Job, ARGV[2] the registry events channel
-- Returns the new entry id, COLD (admitted while no worker runs: a version that scales from zero,
-- whose manager is told at once), or NOT_FOUND / NO_WORKER / QUEUE_FULL.
local config = redis.call('HMGET', KEYS[1], 'state', 'job_queue_size', 'scale_from_zero')
if config[1] ~= 'active' then
  return 'NOT_FOUND'
end
local cold = redis.call('HLEN', KEYS[2]) == 0
if cold and config[3] ~= '1' then
  return 'NO_WORKER'
end
-- Acked jobs are deleted, so XLEN counts queued plus in-flight jobs.
local limit = tonumber(config[2])
if limit ~= nil and redis.call('XLEN', KEYS[3]) >= limit then
  return 'QUEUE_FULL'
end
local id = redis.call('XADD', KEYS[3], '*', 'm', ARGV[1])
if cold then
  redis.call('PUBLISH', ARGV[2], '{"kind": "demand", "stream": "' .. KEYS[3] .. '"}')
  return 'COLD'
end
return id
