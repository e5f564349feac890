-- Admit one job to a model version's job stream by the admission rule (rule.lua), and add it, in one
-- atomic step.
-- KEYS[1] version config hash, KEYS[2] workers hash, KEYS[3] job stream
-- ARGV[1] the encoded Job, ARGV[2] the registry events channel
-- Returns the new entry id, COLD (admitted while no worker runs: a version that scales from zero,
-- whose manager is told at once), or NOT_FOUND / NO_WORKER / QUEUE_FULL.
local refusal, cold = refusal_of(KEYS[1], KEYS[2], KEYS[3], 0)
if refusal then
  return refusal
end
local id = redis.call('XADD', KEYS[3], '*', 'm', ARGV[1])
if cold then
  ask_for_worker(ARGV[2], KEYS[3])
  return 'COLD'
end
return id
