-- Create the gateway's reply stream if it is missing and refresh its TTL and the alive key.
-- KEYS[1] reply stream, KEYS[2] gateway alive key (same {gw:<id>} hash tag)
-- ARGV[1] TTL in ms, ARGV[2] alive value
-- Returns 1 when the stream had to be created, else 0.
local created = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- MAXLEN 0 leaves an existing, empty stream: workers XADD with NOMKSTREAM.
  redis.call('XADD', KEYS[1], 'MAXLEN', '0', '*', 'init', '1')
  created = 1
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[1])
return created
