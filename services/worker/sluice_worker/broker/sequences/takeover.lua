-- Take one sequence over from a worker that died (or stopped and handed it over: holder ''), if it
-- is still that worker's. KEYS[1] the sequence's hash, KEYS[2] its job stream, KEYS[3] the previous
-- holder's held set, KEYS[4] this worker's held set, KEYS[5] the version's holders set, KEYS[6] live
-- sequences. ARGV[1] previous holder, ARGV[2] this worker, ARGV[3] the sequence id.
-- Returns nil (not taken: someone else holds it, or it expired and is cleaned up here) or
-- {lost, has_state, state, attempt, head}: whether its state is lost (its handler ran and saved
-- nothing), its saved state, and the delivery count of its first unanswered job (head).
local from, me, sid = ARGV[1], ARGV[2], ARGV[3]
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder == false then
  redis.call('SREM', KEYS[3], sid)
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[6], sid)
  return nil
end
if holder ~= from then
  redis.call('SREM', KEYS[3], sid)
  return nil
end
redis.call('SREM', KEYS[3], sid)
redis.call('SADD', KEYS[4], sid)
redis.call('SADD', KEYS[5], me)
redis.call('HSET', KEYS[1], 'holder', me)
local state = redis.call('HGET', KEYS[1], 'state')
if tonumber(redis.call('HGET', KEYS[1], 'served') or '0') > 0 and state == false then
  redis.call('HSET', KEYS[1], 'lost', '1')
end
local lost = redis.call('HGET', KEYS[1], 'lost') == '1' and 1 or 0
-- A holder that died may have been running the first unanswered job: one delivery more for it.
local attempt, head = 1, ''
local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
if #first > 0 then
  head = first[1][1]
  if from ~= '' then
    if redis.call('HGET', KEYS[1], 'moved_head') == head then
      attempt = redis.call('HINCRBY', KEYS[1], 'moved', 1) + 1
    else
      redis.call('HSET', KEYS[1], 'moved_head', head, 'moved', 1)
      attempt = 2
    end
  end
end
return {lost, state and 1 or 0, state or '', attempt, head}
