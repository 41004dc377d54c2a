package reserve

import "github.com/redis/go-redis/v9"

// Shared Lua helpers. A scope is a sorted set Z (member -> time in ms it
// stops counting) and a hash H (member -> "amount:admitted_ms", plus "_sum").
// A token scope's waiters are members "w:<id>" of Z too, scored when their
// mark ends, counted in H's "_waiters"; "_wait" is when the window frees for
// the last of them.
const luaHelpers = `
-- numbers reach Redis as integers, never in exponent notation
local function int(x) return string.format('%d', x) end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function amount_of(v)
  if not v then return 0, 0 end
  local a, at = string.match(v, '^(%-?%d+):(%d+)$')
  return tonumber(a), tonumber(at)
end
-- one waiter fewer on a scope
local function unwait(h, n)
  if n > 0 and redis.call('HINCRBY', h, '_waiters', -n) <= 0 then redis.call('HDEL', h, '_waiters') end
end
-- drop members whose time has come, return what the scope still holds
local function clean(z, h, now)
  while true do
    local old = redis.call('ZRANGEBYSCORE', z, '-inf', int(now), 'LIMIT', 0, 500)
    if #old == 0 then break end
    local freed, waiters = 0, 0
    for _, m in ipairs(old) do
      if string.sub(m, 1, 2) == 'w:' then waiters = waiters + 1 else freed = freed + amount_of(redis.call('HGET', h, m)) end
    end
    redis.call('HDEL', h, unpack(old))
    redis.call('ZREM', z, unpack(old))
    redis.call('HINCRBY', h, '_sum', int(-freed))
    unwait(h, waiters)
    if #old < 500 then break end
  end
  return tonumber(redis.call('HGET', h, '_sum') or '0')
end
`

// reserveScript admits a request into every scope or none.
//
// KEYS[1] settled marker, then per scope i: KEYS[3i-1] zset, KEYS[3i]
// hash, KEYS[3i+1] spend base (the ledger's month hash for the tenant's
// budget, the key's spend counter for a key budget; unused for tokens).
// ARGV[1] member, ARGV[2] ttl ms, ARGV[3] key expiry ms, ARGV[4] n, then per
// scope i: ARGV[3i+2] kind ('t' tokens, 'm' tenant money, 'k' key money),
// ARGV[3i+3] limit, ARGV[3i+4] amount; then ARGV[3n+5] how long the request
// waits when a token scope refuses it (ms, 0: it does not), ARGV[3n+6] '1'
// when it waited its turn (the queue admitted it), ARGV[3n+7] the window
// (ms) a refusal's wait is capped at, ARGV[3n+8] the grace (ms) a token
// scope's waiters keep it after the time their window frees. A refusal the
// request will wait out makes it one of the scope's waiters (until its
// window frees plus the grace, or until it is admitted or leaves: Leave).
// Returns {1, 0, 0, 0, now} admitted, {2, ...} already reserved or settled,
// {0, i, retry_ms, used, now, held, behind} refused by scope i; retry_ms -1:
// never fits, -2: only the budget period's reset frees room; behind 1: the
// request would fit, but requests refused before it wait for the window
// (the scope hash's "_wait": when it frees for them) and come first.
var reserveScript = redis.NewScript(luaHelpers + `
local member, ttl, keyttl, n = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local waits, queued = tonumber(ARGV[3 * n + 5]), ARGV[3 * n + 6] == '1'
local window, grace = tonumber(ARGV[3 * n + 7]), tonumber(ARGV[3 * n + 8])
local now = now_ms()
local wm = 'w:' .. string.sub(member, 3)
-- this request waits on scope (z, h) until the window frees at w
local function mark(z, h, w)
  local old = redis.call('ZSCORE', z, wm)
  if not old then redis.call('HINCRBY', h, '_waiters', 1) end
  redis.call('ZADD', z, int(math.max(tonumber(old or '0'), w + grace)), wm)
  redis.call('HSET', h, '_wait', int(math.max(tonumber(redis.call('HGET', h, '_wait') or '0'), w)))
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {2, 0, 0, 0, now} end
for i = 1, n do
  if redis.call('HEXISTS', KEYS[3 * i], member) == 1 then return {2, 0, 0, 0, now} end
end
for i = 1, n do
  local z, h, base = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local kind, limit, amount = ARGV[3 * i + 2], tonumber(ARGV[3 * i + 3]), tonumber(ARGV[3 * i + 4])
  local held = clean(z, h, now)
  local used = held
  if kind == 'm' then used = used + tonumber(redis.call('HGET', base, '*|cost') or '0') end
  if kind == 'k' then used = used + tonumber(redis.call('GET', base) or '0') end
  if kind == 't' and not queued and tonumber(redis.call('HGET', h, '_waiters') or '0') > 0 then
    local w = tonumber(redis.call('HGET', h, '_wait') or '0')
    if now < w + grace then
      -- behind the waiters; if it waits for them, the next newcomer is
      -- behind it too
      if waits > 0 and math.max(w - now, 0) <= waits then mark(z, h, w) end
      return {0, i, math.max(w - now, 0), used, now, held, 1}
    end
  end
  if used + amount > limit then
    local retry = -1
    local need = used + amount - limit
    if amount <= limit then
      if need > held then
        retry = -2
      else
        local freed, off = 0, 0
        while retry < 0 do
          local ms = redis.call('ZRANGE', z, off, off + 199, 'WITHSCORES')
          if #ms == 0 then break end
          for j = 1, #ms, 2 do
            freed = freed + amount_of(redis.call('HGET', h, ms[j]))
            if freed >= need then retry = tonumber(ms[j + 1]) - now; break end
          end
          off = off + 200
        end
      end
    end
    if kind == 't' and waits > 0 and retry >= 0 and math.min(retry, window) <= waits then
      mark(z, h, now + math.min(retry, window))
    end
    return {0, i, retry, used, now, held, 0}
  end
end
for i = 1, n do
  local z, h = KEYS[3 * i - 1], KEYS[3 * i]
  local amount = ARGV[3 * i + 4]
  redis.call('ZADD', z, int(now + ttl), member)
  redis.call('HSET', h, member, amount .. ':' .. int(now))
  redis.call('HINCRBY', h, '_sum', amount)
  unwait(h, redis.call('ZREM', z, wm))
  redis.call('PEXPIRE', z, keyttl)
  redis.call('PEXPIRE', h, keyttl)
end
return {1, 0, 0, 0, now}
`)

// leaveScript: a waiter stops waiting (its wait ended, its client left)
// without being admitted; newcomers are no longer held behind it.
//
// KEYS per token scope i: KEYS[2i-1] zset, KEYS[2i] hash. ARGV[1] member.
// Returns how many scopes it was waiting on.
var leaveScript = redis.NewScript(luaHelpers + `
local wm = 'w:' .. string.sub(ARGV[1], 3)
local n = 0
for i = 1, #KEYS / 2 do
  local z, h = KEYS[2 * i - 1], KEYS[2 * i]
  local gone = redis.call('ZREM', z, wm)
  unwait(h, gone)
  n = n + gone
end
return n
`)

// settleScript replaces reservations by real amounts, once per request.
//
// KEYS[1] settled marker, then per scope i: KEYS[3i-1] zset, KEYS[3i] hash,
// KEYS[3i+1] spend base. ARGV[1] member, ARGV[2] marker ttl ms, ARGV[3]
// window ms, ARGV[4] n, then per scope i: ARGV[3i+2] kind ('c' counts a
// key's spend and touches no hold: a replay after the holds expired),
// ARGV[3i+3] actual amount, ARGV[3i+4] the
// spend counter's expiry in ms (0: none; key scopes only).
// Returns {0} when already settled, else {1, reserved_1, ..., reserved_n,
// spent_1, ..., spent_n}: reserved is 0 for a scope whose reservation had
// expired (or that held nothing), spent the key's spend counter after this
// request (0 for other kinds).
//
// A key scope adds the actual cost to the key's counter in the same script
// that drops its hold, whether or not the hold is still there: the cost
// was incurred, and the key's spend never shows neither.
var settleScript = redis.NewScript(luaHelpers + `
local member, window, n = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2]) then return {0} end
local now = now_ms()
local out = {1}
for i = 1, n do
  local z, h, base = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local kind, actual, basettl = ARGV[3 * i + 2], tonumber(ARGV[3 * i + 3]), tonumber(ARGV[3 * i + 4])
  local reserved, at = 0, 0
  if kind ~= 'c' then reserved, at = amount_of(redis.call('HGET', h, member)) end
  out[i + 1] = reserved
  out[n + i + 1] = 0
  if at ~= 0 then
    local until_ms = at + window
    if kind ~= 't' or actual <= 0 or until_ms <= now then
      redis.call('HDEL', h, member)
      redis.call('ZREM', z, member)
      redis.call('HINCRBY', h, '_sum', int(-reserved))
    else
      redis.call('HSET', h, member, int(actual) .. ':' .. int(at))
      redis.call('ZADD', z, int(until_ms), member)
      redis.call('HINCRBY', h, '_sum', int(actual - reserved))
    end
  end
  if kind == 'k' or kind == 'c' then
    out[n + i + 1] = redis.call('INCRBY', base, int(actual))
    if basettl > 0 then redis.call('PEXPIRE', base, int(basettl)) end
  end
end
return out
`)
