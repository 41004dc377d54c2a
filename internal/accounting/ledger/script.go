package ledger

import "github.com/redis/go-redis/v9"

// recordScript adds one entry once. The month hash holds the tenant's
// totals and one set of counters per model|backend|key; the day hash holds
// the tenant's totals only (what the report shows per day).
//
// The dedupe key holds the entry itself (JSON) for as long as it dedupes,
// so an operator finds a request by the id its client quotes (Lookup).
//
// KEYS[1] dedupe key, KEYS[2] month hash, KEYS[3] day hash (same slot).
// ARGV[1] dedupe TTL s, ARGV[2] retention s, ARGV[3] dims, ARGV[4..11]
// requests, input, output, cached, reasoning, cost, streamed, partial,
// ARGV[12] the entry as JSON.
// Returns {1 written | 0 duplicate, tenant month cost as a string}.
var recordScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[12], 'NX', 'EX', ARGV[1]) then
  return {0, redis.call('HGET', KEYS[2], '*|cost') or '0'}
end
local names = {'req', 'in', 'out', 'cached', 'reasoning', 'cost', 'streamed', 'partial'}
for i, n in ipairs(names) do
  local v = ARGV[3 + i]
  if v ~= '0' then
    redis.call('HINCRBY', KEYS[2], ARGV[3] .. '|' .. n, v)
    redis.call('HINCRBY', KEYS[2], '*|' .. n, v)
    redis.call('HINCRBY', KEYS[3], '*|' .. n, v)
  end
end
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[2])
return {1, redis.call('HGET', KEYS[2], '*|cost') or '0'}
`)
