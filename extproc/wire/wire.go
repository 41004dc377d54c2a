// Package wire adapts swarmgate's policy and accounting packages (keypool,
// accounting/usage, accounting/ledger, accounting/budget) to the interfaces
// package extproc defines at the consumer.
package wire

import (
	"bytes"
	"context"
	"errors"
	"github.com/swarmgate/swarmgate/internal/admission"
	"time"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/usage"
	"github.com/swarmgate/swarmgate/internal/admin"
	"github.com/swarmgate/swarmgate/internal/affinity"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
)

// Keys adapts *keypool.Pools.
func Keys(p *keypool.Pools) extproc.KeyPicker { return keys{p} }

type keys struct{ p *keypool.Pools }

func (k keys) Pick(ctx context.Context, backend string, req extproc.PickRequest) (extproc.Lease, error) {
	l, err := k.p.Pick(ctx, backend, keypool.PickRequest{RequestID: req.RequestID, Attempt: req.Attempt, Sticky: req.Sticky, EstTokens: req.EstTokens,
		LastResort: req.LastResort, Key: req.Key, Extend: req.Extend,
		// A half-open key whose probe is out is still better than none: its
		// 429/5xx is retried by Envoy elsewhere, the upstream filter's local
		// reply is not.
		BestEffort: true})
	if err != nil {
		var ex *keypool.ExhaustedError
		if errors.As(err, &ex) {
			return extproc.Lease{}, &extproc.NoKeyError{RetryAfter: ex.RetryAfter, Failing: ex.Failing}
		}
		if errors.Is(err, keypool.ErrNoKey) {
			return extproc.Lease{}, errors.Join(extproc.ErrNoKey, err)
		}
		return extproc.Lease{}, err
	}
	// The outcome arrives through Report (the response-headers message of
	// the same attempt), which frees the in-flight slot.
	return extproc.Lease{KeyID: l.KeyID, Secret: l.Secret.Value()}, nil
}

func (k keys) Report(ctx context.Context, backend, keyID, requestID string, out extproc.Outcome) {
	o, _ := out.(keypool.Outcome)
	_ = k.p.Report(ctx, backend, keyID, requestID, o)
}

func (k keys) Available(backends []string) (bool, time.Duration) { return k.p.Available(backends) }

func (k keys) Failing(backends []string) bool { return k.p.Failing(backends) }

func (k keys) KeyAvailable(backend, key string) (bool, time.Duration, bool) {
	return k.p.KeyAvailable(backend, key)
}

func (k keys) Unanswered(ctx context.Context, backend, keyID, requestID string) {
	_ = k.p.Unanswered(ctx, backend, keyID, requestID) // unknown backend or key: a config reload removed it
}

func (k keys) Cancelled(requestID string) { k.p.Cancelled(requestID) }

func (k keys) ParseOutcome(status int, header func(string) string) extproc.Outcome {
	return keypool.ParseOutcome(status, header)
}

// Usage adapts accounting/usage.
func Usage() extproc.UsageCodec { return codec{} }

type codec struct{}

func (codec) FromJSON(b []byte) (extproc.Usage, bool) { return usage.FromJSON(b) }

func (codec) FromJSONTail(b []byte) (extproc.Usage, bool) { return usage.FromJSONTail(b) }

func (codec) ResponseID(b []byte) ([]byte, bool) { return usage.ResponseID(b) }

func (codec) NewStream() extproc.UsageStream { return &usage.StreamParser{} }
func (codec) NewFilter() extproc.ChunkFilter { return &usage.StreamFilter{} }
func (codec) NewGzip() extproc.Decoder {
	d := &gz{}
	d.g = usage.NewGzipStream(&d.out)
	return d
}

type gz struct {
	g   *usage.GzipStream
	out bytes.Buffer
}

func (d *gz) Decode(chunk []byte) ([]byte, error) {
	d.out.Reset()
	_, err := d.g.Write(chunk)
	return d.out.Bytes(), err
}

func (d *gz) Close() ([]byte, error) {
	d.out.Reset()
	err := d.g.Close()
	return d.out.Bytes(), err
}

// Ledger adapts *ledger.Ledger. The entry arrives priced (Entry.Cost, at
// the serving target's price); the config argument is no longer read and
// stays only for the callers' sake.
func Ledger(l *ledger.Ledger, _ func() *config.Config) extproc.Recorder { return recorder{l} }

type recorder struct{ l *ledger.Ledger }

func (r recorder) Record(ctx context.Context, e extproc.Entry) error {
	le := ledger.Entry{RequestID: e.RequestID, Tenant: e.Tenant, Model: e.Model, Backend: e.Backend, KeyID: e.UpstreamKeyID,
		VirtualKeyID: e.VirtualKeyID, Labels: e.KeyLabels, Status: e.Status, Usage: e.Usage, Cost: e.Cost, Time: e.Time, Streamed: e.Streamed, Partial: e.Disconnected}
	if e.UpstreamModel != e.Model {
		le.UpstreamModel = e.UpstreamModel
	}
	return r.l.Record(ctx, le)
}

// Refusals adapts the admin status page's *admin.RefusalLog.
func Refusals(l *admin.RefusalLog) extproc.RefusalLog { return refusals{l} }

type refusals struct{ l *admin.RefusalLog }

func (r refusals) Refused(tenant, model string, status int, code, reason string) {
	r.l.Add(admin.Refusal{Tenant: tenant, Model: model, Status: status, Reason: code + ": " + reason})
}

// Pace implements extproc.KeyPacer.
func (k keys) Pace(backends []string) extproc.Rate {
	r, t := k.p.Pace(backends)
	return extproc.Rate{Requests: r, Tokens: t}
}

// Queue adapts an *admission.Queue to extproc.AdmissionQueue.
func Queue(q *admission.Queue) extproc.AdmissionQueue { return queue{q} }

type queue struct{ q *admission.Queue }

func (a queue) Admit(ctx context.Context, r extproc.QueueRequest, capacity func() (bool, time.Duration, extproc.Rate)) extproc.QueueResult {
	res := a.q.Admit(ctx, admission.Request{Scope: r.Scope, Tenant: r.Tenant, Weight: r.Weight, Class: r.Priority,
		ClassName: r.Class, MaxWait: r.MaxWait, Tokens: r.Tokens, Session: r.Session, OnWait: r.OnWait},
		func() (bool, time.Duration, admission.Pace) {
			ok, ra, rate := capacity()
			return ok, ra, admission.Pace{Rate: rate.Requests, Burst: 1, TokenRate: rate.Tokens}
		})
	return extproc.QueueResult{Admitted: res.Admitted, Reason: string(res.Reason), Waited: res.Waited, RetryAfter: res.RetryAfter}
}

// Affinity adapts *affinity.Store.
func Affinity(s *affinity.Store) extproc.ResponseAffinity { return aff{s} }

type aff struct{ s *affinity.Store }

func (a aff) Remember(id string, o extproc.ResponseOwner, ttl time.Duration) {
	a.s.Remember(id, affinity.Owner{Backend: o.Backend, Key: o.KeyID, Tenant: o.Tenant}, ttl)
}

func (a aff) Owner(ctx context.Context, id string) (extproc.ResponseOwner, error) {
	o, err := a.s.Owner(ctx, id)
	if errors.Is(err, affinity.ErrNotFound) {
		return extproc.ResponseOwner{}, extproc.ErrUnknownResponse
	}
	return extproc.ResponseOwner{Backend: o.Backend, KeyID: o.Key, Tenant: o.Tenant}, err
}
