package ledger

import "github.com/redis/go-redis/v9"

// recordScript adds one entry once. The month hash holds the tenant's
// totals and one set of counters per model|backend|key; the day hash holds
// the tenant's totals only (what the report shows per day). The scope
// hashes (scopes.go: the virtual key's and each label's day, month and
// all-time) hold plain counters; the rankings get the entry's cost under
// its key id or label value. All of it happens after the SET NX, in the
// same atomic step, so every scope is exact exactly as the tenant is.
//
// The dedupe key holds the entry itself (JSON) for as long as it dedupes,
// so an operator finds a request by the id its client quotes (Lookup).
//
// KEYS[1] dedupe key, KEYS[2] month hash, KEYS[3] day hash, KEYS[4..3+n]
// scope hashes, KEYS[4+n..] rankings (all in the tenant's slot).
// ARGV[1] dedupe TTL s, ARGV[2] retention s, ARGV[3] dims, ARGV[4..12]
// requests, input, output, cached, reasoning, cost, streamed, partial,
// total, ARGV[13] the entry as JSON, ARGV[14] n, ARGV[15..] the ranking
// members, one per ranking key.
// Returns {1 written | 0 duplicate, tenant month cost as a string}.
var recordScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[13], 'NX', 'EX', ARGV[1]) then
  return {0, redis.call('HGET', KEYS[2], '*|cost') or '0'}
end
local last = 3 + tonumber(ARGV[14])
local names = {'req', 'in', 'out', 'cached', 'reasoning', 'cost', 'streamed', 'partial', 'total'}
for i, n in ipairs(names) do
  local v = ARGV[3 + i]
  if v ~= '0' then
    redis.call('HINCRBY', KEYS[2], ARGV[3] .. '|' .. n, v)
    redis.call('HINCRBY', KEYS[2], '*|' .. n, v)
    redis.call('HINCRBY', KEYS[3], '*|' .. n, v)
    for k = 4, last do
      redis.call('HINCRBY', KEYS[k], n, v)
    end
  end
end
if ARGV[9] ~= '0' then
  for k = last + 1, #KEYS do
    redis.call('ZINCRBY', KEYS[k], ARGV[9], ARGV[15 + k - last - 1])
  end
end
for k = 2, #KEYS do
  redis.call('EXPIRE', KEYS[k], ARGV[2])
end
return {1, redis.call('HGET', KEYS[2], '*|cost') or '0'}
`)
