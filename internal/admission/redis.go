package admission

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOrder keeps the order in Redis so every replica admits from one
// queue per scope: <prefix>admission:{<scope>}:q (tags), :dl (deadlines)
// and :s (virtual time, GCRA arrival time, tenants' last tags), in one hash
// slot. Each decision is one EVALSHA; time is Redis's own (TIME), so
// replicas' clocks do not skew the pace.
type RedisOrder struct {
	rdb    redis.UniversalClient
	prefix string
	// TTL bounds how long an idle scope's state is kept.
	ttl time.Duration
}

// NewRedisOrder returns an order in rdb under prefix.
func NewRedisOrder(rdb redis.UniversalClient, prefix string) *RedisOrder {
	return &RedisOrder{rdb: rdb, prefix: prefix, ttl: 10 * time.Minute}
}

func (o *RedisOrder) keys(scope string) []string {
	base := o.prefix + "admission:{" + scope + "}:"
	return []string{base + "q", base + "dl", base + "s"}
}

// stepScript: ARGV id, tenant, weight, class, deadline (ms from now), rate
// (per s), burst, ready (0/1), ttl (ms), token rate (per s), tokens, lead
// (the last rank that may be admitted), then (id, tokens) of each ticket to
// admit after it (Order.Step's next).
// Returns {admitted, wait ms, ahead, tag as string, next admitted}. The pace is two GCRAs
// (admission/order.go gcraWait): requests on tat, tokens on ttat.
var stepScript = redis.NewScript(`
local q, dl, st = KEYS[1], KEYS[2], KEYS[3]
local id, tenant = ARGV[1], ARGV[2]
local w, class, left = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local rate, burst, ready, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8] == '1', tonumber(ARGV[9])
local trate, tokens, lead = tonumber(ARGV[10]), math.max(tonumber(ARGV[11]), 1), tonumber(ARGV[12])
local span = 1099511627776
-- tostring keeps 14 digits: 10 µs of a millisecond timestamp, enough to
-- hold a fast pace's next ticket back by a rounded-up millisecond.
local function num(x) return string.format('%.17g', x) end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + tonumber(tm[2]) / 1000
local v = tonumber(redis.call('HGET', st, 'v') or '0')
` + refundLua + `
local old = redis.call('ZRANGEBYSCORE', dl, '-inf', now, 'LIMIT', 0, 64)
for _, x in ipairs(old) do redis.call('ZREM', q, x); redis.call('ZREM', dl, x); refund(x) end
local tat = tonumber(redis.call('HGET', st, 'tat') or '0')
local ttat = tonumber(redis.call('HGET', st, 'ttat') or '0')
local function pace(tokens)
  local d, nt, ntt = 0, tat, ttat
  if rate > 0 then
    local iv = 1000 / rate
    local t = math.max(tat, now)
    d = t - (math.max(burst, 1) - 1) * iv - now
    nt = t + iv
  end
  if trate > 0 then
    local t = math.max(ttat, now)
    d = math.max(d, t - now)
    ntt = t + tokens * 1000 / trate
  end
  if d > 0 then return d, tat, ttat end
  return 0, nt, ntt
end
redis.call('PEXPIRE', st, ttl)
local tag = redis.call('ZSCORE', q, id)
if not tag then
  local fin = math.max(v, tonumber(redis.call('HGET', st, 'f:' .. tenant) or '0')) + 1 / w
  redis.call('HSET', st, 'f:' .. tenant, num(fin))
  if ready and redis.call('ZCARD', q) == 0 then
    local wait, nt, ntt = pace(tokens)
    if wait == 0 then
      redis.call('HSET', st, 'tat', num(nt), 'ttat', num(ntt), 'v', num(fin))
      return {1, 0, 0, '', 0}
    end
  end
  tag = class * span + fin
  redis.call('ZADD', q, tag, id)
  redis.call('HSET', st, 'm:' .. id, num(1 / w) .. ' ' .. tenant)
  redis.call('ZADD', dl, now + left, id)
  redis.call('PEXPIRE', q, ttl)
  redis.call('PEXPIRE', dl, ttl)
else
  tag = tonumber(tag)
end
local rank = redis.call('ZRANK', q, id)
if rank > lead or not ready then return {0, 0, rank, num(tag), 0} end
local wait, nt, ntt = pace(tokens)
if wait > 0 then return {0, math.ceil(wait), 0, num(tag), 0} end
local function admit(x, xtag, xnt, xntt)
  redis.call('ZREM', q, x)
  redis.call('ZREM', dl, x)
  redis.call('HDEL', st, 'm:' .. x)
  tat, ttat = xnt, xntt
  v = math.max(v, xtag - math.floor(xtag / span) * span)
end
admit(id, tag, nt, ntt)
local n = 0
for i = 13, #ARGV - 1, 2 do
  local x = ARGV[i]
  local xtag = redis.call('ZSCORE', q, x)
  -- first place only: within the lead a batch drew the overtaking
  -- across replicas past the lead (TestSwarmFairnessAcrossReplicas)
  if not xtag or redis.call('ZRANK', q, x) > 0 then break end
  local xw, xnt, xntt = pace(math.max(tonumber(ARGV[i + 1]), 1))
  if xw > 0 then break end
  admit(x, tonumber(xtag), xnt, xntt)
  n = n + 1
end
redis.call('HSET', st, 'tat', num(tat), 'ttat', num(ttat), 'v', num(v))
return {1, 0, 0, num(tag), n}
`)

// Step implements Order.
func (o *RedisOrder) Step(ctx context.Context, t *Ticket, next []*Ticket, p Pace, ready bool) (Decision, error) {
	left := max(time.Until(t.Deadline), time.Millisecond)
	r := "0"
	if ready {
		r = "1"
	}
	args := make([]any, 0, 12+2*len(next))
	args = append(args, t.ID, t.Tenant, t.Weight, t.Class,
		left.Milliseconds(), p.Rate, max(p.Burst, 1), r, o.ttl.Milliseconds(), p.TokenRate, t.Tokens, max(t.Lead, 0))
	for _, n := range next {
		args = append(args, n.ID, n.Tokens) // same scope: the caller's promise
	}
	res, err := stepScript.Run(ctx, o.rdb, o.keys(t.Scope), args...).Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("admission: order step: %w", err)
	}
	if len(res) != 5 {
		return Decision{}, fmt.Errorf("admission: order step: %d values", len(res))
	}
	admitted, _ := res[0].(int64)
	wait, _ := res[1].(int64)
	ahead, _ := res[2].(int64)
	tagS, _ := res[3].(string)
	more, _ := res[4].(int64)
	d := Decision{Admitted: admitted == 1, Joined: admitted != 1, Wait: time.Duration(wait) * time.Millisecond, Ahead: ahead, Next: int(more)}
	if tagS != "" {
		d.Tag, _ = strconv.ParseFloat(tagS, 64)
	}
	return d, nil
}

// refundLua defines refund(x): a ticket x that leaves unadmitted gives
// its tenant back what joining charged (doc.go), from the 'm:'..x field
// its join wrote (1/weight and the tenant). Needs st, v and num.
const refundLua = `
local function refund(x)
  local m = redis.call('HGET', st, 'm:' .. x)
  if not m then return end
  redis.call('HDEL', st, 'm:' .. x)
  local sp = string.find(m, ' ', 1, true)
  local f = 'f:' .. string.sub(m, sp + 1)
  local fin = tonumber(redis.call('HGET', st, f) or '0')
  redis.call('HSET', st, f, num(math.max(v, fin - tonumber(string.sub(m, 1, sp - 1)))))
end`

// leaveScript: KEYS q, dl, st; ARGV id. Takes the ticket out, refunding
// its tenant when it was still waiting.
var leaveScript = redis.NewScript(`
local q, dl, st = KEYS[1], KEYS[2], KEYS[3]
local function num(x) return string.format('%.17g', x) end
local v = tonumber(redis.call('HGET', st, 'v') or '0')
` + refundLua + `
redis.call('ZREM', dl, ARGV[1])
if redis.call('ZREM', q, ARGV[1]) == 1 then refund(ARGV[1]) else redis.call('HDEL', st, 'm:' .. ARGV[1]) end
return 0
`)

// Leave implements Order.
func (o *RedisOrder) Leave(ctx context.Context, t *Ticket) error {
	if err := leaveScript.Run(ctx, o.rdb, o.keys(t.Scope), t.ID).Err(); err != nil {
		return fmt.Errorf("admission: leave: %w", err)
	}
	return nil
}

// LeaveAll implements BatchLeaver: one pipeline for every ticket.
func (o *RedisOrder) LeaveAll(ctx context.Context, ts []Ticket) error {
	_, err := o.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range ts {
			// Eval, not EvalSha: a pipeline cannot fall back on NOSCRIPT.
			leaveScript.Eval(ctx, p, o.keys(t.Scope), t.ID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("admission: leave %d tickets: %w", len(ts), err)
	}
	return nil
}

// Depth implements Order.
func (o *RedisOrder) Depth(ctx context.Context, scope string) (int64, error) {
	n, err := o.rdb.ZCard(ctx, o.keys(scope)[0]).Result()
	if err != nil {
		return 0, fmt.Errorf("admission: depth: %w", err)
	}
	return n, nil
}
