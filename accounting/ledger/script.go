package ledger

import "github.com/redis/go-redis/v9"

// recordScript adds one entry once.
//
// KEYS[1] dedupe key, KEYS[2] month hash, KEYS[3] day hash (same slot).
// ARGV[1] dedupe TTL s, ARGV[2] retention s, ARGV[3] dims, ARGV[4..11]
// requests, input, output, cached, reasoning, cost, streamed, partial.
// Returns {1 written | 0 duplicate, tenant month cost as a string}.
var recordScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return {0, redis.call('HGET', KEYS[2], '*|cost') or '0'}
end
local names = {'req', 'in', 'out', 'cached', 'reasoning', 'cost', 'streamed', 'partial'}
for k = 2, 3 do
  for i, n in ipairs(names) do
    local v = ARGV[3 + i]
    if v ~= '0' then
      redis.call('HINCRBY', KEYS[k], ARGV[3] .. '|' .. n, v)
      redis.call('HINCRBY', KEYS[k], '*|' .. n, v)
    end
  end
  redis.call('EXPIRE', KEYS[k], ARGV[2])
end
return {1, redis.call('HGET', KEYS[2], '*|cost') or '0'}
`)
