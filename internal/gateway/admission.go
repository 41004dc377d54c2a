package gateway

import (
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/identity"
	"github.com/swarmgate/swarmgate/internal/redisconn"
)

// AdmissionClient is the admission order's own Redis client for cfg: each
// round trip bounded by admission.redis_timeout, the wait for one of its
// pooled connections apart (redisconn.RoundTrip), in a pool of its own so
// waiters are not held behind the ledger's or the key pools' commands.
func AdmissionClient(cfg *config.Config) (redis.UniversalClient, error) {
	return redisconn.New(cfg.Redis, redisconn.RoundTrip(cfg.Admission.RedisTimeout.D()))
}

// AdmissionOptions are the queue's options for cfg with its order and
// sessions on rdb (an AdmissionClient), as every ext_proc replica runs it:
// one order for every replica in Redis, each step's context bounding the
// whole call. Queue length, poll, Redis bound, session settings and the
// failure mode are read at start (a reload changing them logs a warning,
// reload.go). The caller sets ReplicaID (unique across replicas), Logger
// and Metrics.
func AdmissionOptions(cfg *config.Config, rdb redis.UniversalClient) admission.Options {
	a := cfg.Admission
	return admission.Options{
		Order:    admission.NewRedisOrder(rdb, cfg.Redis.KeyPrefix),
		MaxQueue: a.MaxQueue, Poll: a.Poll.D(), StepTimeout: redisconn.RoundTripCall(a.RedisTimeout.D()),
		FailOpen: cfg.FailureModes.AdmissionOrder == config.FailOpen,
		Sessions: admission.NewRedisSessions(rdb, cfg.Redis.KeyPrefix), SessionIdle: a.SessionIdle.D(),
		SessionSpan: a.SessionSpan.D(), MaxSessions: a.MaxSessions,
	}
}

// admissionQueue is the queue used while admission.max_wait > 0. Ticket ids
// must be unique across replicas, so they carry a random per-process id.
func (g *Gateway) admissionQueue(p *process) *admission.Queue {
	opts := AdmissionOptions(p.cfg, p.orderRDB)
	opts.ReplicaID, opts.Logger, opts.Metrics = identity.NewRequestID(), g.log.With("component", "admission"), admission.NewMetrics(p.reg)
	return admission.New(opts)
}
