-- Admission of a large job by the admission rule (rule.lua), run inside MULTI ... EXEC right after the
-- job's XADD, so that a large payload reaches the stream without passing through Lua (each pass copies
-- it twice). Nothing runs between the XADD and this script, so the stream's newest entry is the job's:
-- a refused job is deleted before any reader can take it (a reader blocked on the stream wakes with
-- an empty read), and so is the stream if the XADD created it.
-- KEYS[1] version config hash, KEYS[2] workers hash, KEYS[3] job stream
-- ARGV[1] the registry events channel
-- Returns ADMITTED, COLD (admitted while no worker runs), or NOT_FOUND / NO_WORKER / QUEUE_FULL.
local refusal, cold = refusal_of(KEYS[1], KEYS[2], KEYS[3], 1)
if not refusal then
  if cold then
    ask_for_worker(ARGV[1], KEYS[3])
    return 'COLD'
  end
  return 'ADMITTED'
end
local newest = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
redis.call('XDEL', KEYS[3], newest[1][1])
if redis.call('XLEN', KEYS[3]) == 0 and #redis.call('XINFO', 'GROUPS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[3])
end
return refusal
