package extproc

import (
	"context"
	"errors"
	"time"

	"github.com/swarmgate/swarmgate/extproc/admit"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/accounting/usage"
)

// The interfaces below are what the ext_proc service needs from the policy
// and accounting packages (keypool, accounting/*). They are defined here, at
// the consumer, so extproc has no dependency on their internals; package
// extproc/wire adapts the real implementations.

// Usage is provider-reported token usage: the accounting's one usage type.
type Usage = usage.Usage

// UsageCodec reads usage from response bodies.
type UsageCodec interface {
	// FromJSON reads "usage" from a complete JSON response body.
	FromJSON(body []byte) (Usage, bool)
	// FromJSONTail reads it from the last bytes of a body too large to
	// keep whole.
	FromJSONTail(tail []byte) (Usage, bool)
	// ResponseID reads a Responses API body's top-level "id".
	ResponseID(body []byte) ([]byte, bool)
	// NewStream returns an incremental SSE parser.
	NewStream() UsageStream
	// NewFilter returns a per-stream filter that removes the usage-only
	// chunk a client did not ask for.
	NewFilter() ChunkFilter
	// NewGzip returns an incremental gzip decoder (each call decodes only
	// the new bytes: no quadratic re-decompression).
	NewGzip() Decoder
}

// UsageStream parses an SSE response incrementally across chunk boundaries.
type UsageStream interface {
	Write(chunk []byte)
	// Flush ends the stream: an event left without its closing blank line
	// (a provider's last usage chunk, say) is still read.
	Flush()
	Usage() (Usage, bool)
	// Provisional reports whether the usage is only the stream's opening
	// count (Anthropic's message_start: the prompt, and ~1 output token
	// before the answer's count in message_delta).
	Provisional() bool
	// Done reports whether the stream's last event was read ([DONE],
	// message_stop, response.completed…).
	Done() bool
	// DeliveredContentBytes is the size of the content streamed so far (for
	// billing a cut stream by what was delivered).
	DeliveredContentBytes() int64
	// ResponseID is the Responses API response id the stream carried
	// (response.created / response.completed); nil when none.
	ResponseID() []byte
	// Reset makes it ready for a new stream, keeping its buffers.
	Reset()
}

// ChunkFilter rewrites SSE chunks. Write returns the bytes to forward for
// chunk (valid until the next call); it may keep a partial event back until
// the next call. Flush returns what is held back at the end of the stream.
type ChunkFilter interface {
	Write(chunk []byte) []byte
	Flush() []byte
	// Reset makes it ready for a new stream, keeping its buffers.
	Reset()
}

// Decoder decompresses a stream piecewise. Decode returns the bytes decoded
// from chunk (valid until the next call); Close ends the input and returns
// what the decoder still held back.
type Decoder interface {
	Decode(chunk []byte) ([]byte, error)
	Close() ([]byte, error)
}

// KeyPicker chooses upstream API keys per attempt and learns from outcomes.
type KeyPicker interface {
	Pick(ctx context.Context, backend string, req PickRequest) (Lease, error)
	Report(ctx context.Context, backend, keyID, requestID string, out Outcome)
	// Available reports whether any key of the backends is usable, and if
	// none is, how soon one reopens.
	Available(backends []string) (ok bool, retryAfter time.Duration)
	// Failing reports whether every key of the backends is open because it
	// failed rather than because it is rate limited or busy.
	Failing(backends []string) bool
	// ParseOutcome reads an attempt's status and rate-limit headers.
	ParseOutcome(status int, header func(string) string) Outcome
	// Unanswered feeds an attempt that ended with no response headers:
	// the upstream reset the connection or could not be reached, or the
	// client went away and Envoy cancelled the attempt. Only the first
	// counts against the key; Cancelled tells them apart.
	Unanswered(ctx context.Context, backend, keyID, requestID string)
	// Cancelled records that a request's client went away before any
	// response headers (its router-level stream ended without them).
	Cancelled(requestID string)
}

// ResponseAffinity remembers which backend and key created a Responses
// API response, across replicas (package affinity), so a request naming it
// as previous_response_id reaches that key.
type ResponseAffinity interface {
	// Remember queues the record; it never blocks the response path.
	Remember(responseID string, o ResponseOwner, ttl time.Duration)
	// Owner is who created responseID: ErrUnknownResponse when nobody is
	// recorded; another error when the store did not answer in time.
	Owner(ctx context.Context, responseID string) (ResponseOwner, error)
}

// PickRequest describes one upstream attempt.
type PickRequest struct {
	RequestID string
	Attempt   int
	Sticky    string
	EstTokens int
	// LastResort allows the open key that reopens soonest when nothing
	// else is usable (keypool.PickRequest.LastResort).
	LastResort bool
	// Key, when set, is the only key the attempt may use (a Responses
	// request continuing a response this key created).
	Key string
	// Extend lets the pick wait for a paced key's slot beyond Envoy's
	// message_timeout (keypool.PickRequest.Extend).
	Extend Extender
}

// Extender extends Envoy's timer for the message being answered.
type Extender interface {
	Extend(d time.Duration)
}

// Lease is the chosen key. Secret must never be logged.
type Lease struct {
	KeyID  string
	Secret string
}

// Outcome is an attempt's result as the key pool consumes it. It is opaque
// to extproc: ParseOutcome builds it, Report takes it back.
type Outcome any

// Reserver reserves tokens (and budget money) at admission and settles
// them when the request ends (accounting/reserve).
type Reserver interface {
	Reserve(ctx context.Context, r ReserveRequest) (Reservation, error)
	// Leave says that r, refused with a Wait, stopped waiting without a
	// reservation: newcomers are no longer held behind it.
	Leave(ctx context.Context, r ReserveRequest) error
	// Settle replaces the hold by the real usage of the finished (or cut)
	// request; e is the ledger entry, already recorded.
	Settle(ctx context.Context, res Reservation, e Entry) error
	// Release refunds a request no provider served.
	Release(ctx context.Context, res Reservation) error
}

// BudgetChecker tells whether a tenant's hard-capped budget is spent
// (accounting/budget).
type BudgetChecker interface {
	Check(ctx context.Context, tenant string) (BudgetStatus, error)
}

// Recorder writes ledger entries idempotently per request id
// (accounting/ledger).
type Recorder interface {
	Record(ctx context.Context, e Entry) error
}

// Entry is one request's accounting record.
type Entry struct {
	RequestID string
	Time      time.Time
	Tenant    string
	// VirtualKeyID is the key the client presented: a config key's id or
	// a sub-key's; KeyLabels the sub-key's labels (nil for config keys),
	// shared with the key and read only.
	VirtualKeyID string
	KeyLabels    map[string]string
	Model        string // the alias the client asked for
	// UpstreamModel is what the answering backend was asked for (the
	// target's model, else the alias); answers name Model unless the
	// backend exposes it.
	UpstreamModel string
	Backend       string
	UpstreamKeyID string
	Status        int
	Usage         Usage
	// Cost is Usage at the serving target's price, computed once when the
	// request ends: the ledger, the reservation's settlement and the
	// metrics all take it from here.
	Cost pricing.Money
	// Estimated is set when the usage is not the provider's report (cut
	// stream billed per accounting.bill_on_disconnect).
	Estimated    bool
	Disconnected bool
	Streamed     bool
}

// RefusalLog records requests refused at the gateway (admin status page).
// model may be what the client sent.
type RefusalLog interface {
	Refused(tenant, model string, status int, code, reason string)
}

// ErrNoKey is what a KeyPicker returns when every key is open.
var ErrNoKey = errors.New("no usable upstream key")

// NoKeyError is a Pick failure that says when to try again. Failing is set
// when every key failed (5xx, resets, refused credentials) rather than
// being rate limited or busy.
type NoKeyError struct {
	RetryAfter time.Duration
	Failing    bool
}

func (e *NoKeyError) Error() string { return ErrNoKey.Error() }

// Is makes errors.Is(err, ErrNoKey) true.
func (e *NoKeyError) Is(target error) bool { return target == ErrNoKey }

// AdmissionQueue holds a request whose only obstacle is capacity that comes
// back soon, until it can be admitted or its wait ends (package admission).
type AdmissionQueue interface {
	Admit(ctx context.Context, req QueueRequest, capacity func() (ready bool, retryAfter time.Duration, pace Rate)) QueueResult
}

// KeyPacer is what a KeyPicker may also offer: the rate the usable keys
// of backends can take, from their configured and learned limits.
type KeyPacer interface {
	Pace(backends []string) Rate
}

// The admission types are extproc/admit's (the steps that use them have no
// Envoy types); these names keep the adapters' and tests' spelling.
type (
	ResponseOwner  = admit.ResponseOwner
	ReserveRequest = admit.ReserveRequest
	Reservation    = admit.Reservation
	BudgetStatus   = admit.BudgetStatus
	Rate           = admit.Rate
	QueueRequest   = admit.QueueRequest
	QueueResult    = admit.QueueResult
)

// ErrUnknownResponse: no owner is recorded for a previous_response_id.
var ErrUnknownResponse = admit.ErrUnknownResponse
