package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
)

// Alert is one budget threshold event, also the webhook's JSON body.
type Alert struct {
	Type   string `json:"type"` // "budget_threshold", "key_budget_threshold"
	Tenant string `json:"tenant"`
	// KeyID and Period are set on a sub-key budget's alert; Month then
	// names the period's window ("run", "2006-01-02", "2006-01").
	KeyID            string        `json:"key_id,omitempty"`
	Period           string        `json:"period,omitempty"`
	Month            string        `json:"month"`
	ThresholdPercent float64       `json:"threshold_percent"`
	Spent            pricing.Money `json:"spent"`
	Budget           pricing.Money `json:"budget"`
	Currency         string        `json:"currency"`
	// HardCap is set on the 100% alert of a capped budget: new requests
	// are refused from now on.
	HardCap bool `json:"hard_cap"`
	// Requested is set when the 100% alert fired because the cap refused
	// a request on spend alone: Spent plus this worst case is over the
	// budget, so Spent may be below it.
	Requested pricing.Money `json:"requested,omitempty"`
	Time      time.Time     `json:"time"`
	// forget is when this replica may stop remembering the alert was
	// claimed (windowEnd).
	forget time.Time
}

// post delivers an alert, retrying with backoff. It runs in Run, never on
// the data path; a webhook that keeps failing costs a metric and a log line.
func (b *Budgets) post(ctx context.Context, cfg config.Alerts, a Alert) {
	body, err := json.Marshal(a)
	if err != nil {
		b.log.Error("budget alert: encoding", "err", err)
		return
	}
	backoff := b.opts.RetryBackoff
	for attempt := 1; ; attempt++ {
		err := b.postOnce(ctx, cfg, body)
		if err == nil {
			return
		}
		if attempt >= b.opts.WebhookAttempts || ctx.Err() != nil {
			b.m.webhookErrors.Inc()
			b.log.Error("budget alert webhook failed", "tenant", a.Tenant, "threshold_percent", a.ThresholdPercent,
				"attempts", attempt, "err", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

func (b *Budgets) postOnce(ctx context.Context, cfg config.Alerts, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout.D())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.opts.HTTPClient.Do(req)
	if err != nil {
		// The URL may carry a token (Slack-style hooks): report the cause
		// without it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook: status %d", resp.StatusCode)
	}
	return nil
}
