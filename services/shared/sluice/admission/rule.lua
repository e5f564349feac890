-- The admission rule, its one copy: sluice.admission puts it in front of enqueue.lua and
-- admit_added.lua, so that every caller (the gateway's inference jobs, the manager's describe jobs)
-- admits by the same rule. The keys share the version's hash tag.
-- A job is refused when its version is not active (NOT_FOUND), when the version runs no worker and
-- does not scale from zero (NO_WORKER), or when its stream already holds job_queue_size jobs
-- (QUEUE_FULL). Acked jobs are deleted, so XLEN counts queued plus in-flight jobs; `added` is 1
-- when the job itself is already in the stream (admit_added.lua), else 0.
-- Returns the refusal (false: admitted) and whether the version runs no worker (admitted cold).
local function refusal_of(config_key, workers_key, stream_key, added)
  local config = redis.call('HMGET', config_key, 'state', 'job_queue_size', 'scale_from_zero')
  if config[1] ~= 'active' then
    return 'NOT_FOUND', false
  end
  local cold = redis.call('HLEN', workers_key) == 0
  if cold and config[3] ~= '1' then
    return 'NO_WORKER', cold
  end
  local limit = tonumber(config[2])
  if limit ~= nil and redis.call('XLEN', stream_key) - added >= limit then
    return 'QUEUE_FULL', cold
  end
  return false, cold
end

-- A job admitted cold: the manager hears of it at once and starts a worker.
local function ask_for_worker(channel, stream_key)
  redis.call('PUBLISH', channel, '{"kind": "demand", "stream": "' .. stream_key .. '"}')
end

