package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
)

// ReadyCheck is one dependency /readyz looks at. A failing check makes the
// process unready only when Required: a dependency whose failure mode is
// fail-open does not stop traffic, so it must not take the replica out of
// its load balancer either.
type ReadyCheck struct {
	Name     string
	Check    func(ctx context.Context) error
	Required bool
	// Why says what makes it required or not ("failure_modes.budget=closed").
	Why string
	// Policy, when set, decides Required and Why at each probe instead (a
	// config reload may change failure modes).
	Policy func() (required bool, why string)
}

type readyResponse struct {
	Status  string        `json:"status"` // ready | degraded | unready
	Version string        `json:"version,omitempty"`
	Uptime  string        `json:"uptime"`
	Reasons []string      `json:"reasons,omitempty"` // why not ready or degraded
	Checks  []checkResult `json:"checks"`
}

type checkResult struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Required bool   `json:"required"`
	Why      string `json:"why,omitempty"`
	Error    string `json:"error,omitempty"`
	Millis   int64  `json:"ms"`
}

// readyz answers 200 when every required check passes (status "ready", or
// "degraded" when an optional one fails) and 503 otherwise, listing why.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	checks := make([]ReadyCheck, 0, len(s.opts.Ready)+1)
	checks = append(checks, ReadyCheck{
		Name:     "config",
		Required: true,
		Why:      "nothing can be served without a config",
		Check: func(context.Context) error {
			if s.opts.Config() == nil {
				return errors.New("no valid config loaded")
			}
			return nil
		},
	})
	checks = append(checks, s.opts.Ready...)

	results := make([]checkResult, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		if c.Policy != nil {
			c.Required, c.Why = c.Policy()
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), s.opts.CheckTimeout)
			defer cancel()
			start := time.Now()
			err := runCheck(ctx, c.Check)
			res := checkResult{Name: c.Name, OK: err == nil, Required: c.Required, Why: c.Why, Millis: time.Since(start).Milliseconds()}
			if err != nil {
				res.Error = err.Error()
			}
			results[i] = res
		})
	}
	wg.Wait()

	resp := readyResponse{Status: "ready", Version: s.opts.Version, Uptime: time.Since(s.started).Round(time.Second).String(), Checks: results}
	code := http.StatusOK
	for _, res := range results {
		if res.OK {
			continue
		}
		reason := res.Name + ": " + res.Error
		if res.Why != "" {
			reason += " (" + res.Why + ")"
		}
		if res.Required {
			resp.Status, code = "unready", http.StatusServiceUnavailable
			resp.Reasons = append(resp.Reasons, reason)
		} else {
			if resp.Status == "ready" {
				resp.Status = "degraded"
			}
			resp.Reasons = append(resp.Reasons, reason+"; not required, serving on")
		}
	}
	if code != http.StatusOK {
		s.log.Warn("admin: not ready", "reasons", strings.Join(resp.Reasons, "; "))
	}
	s.writeJSON(w, code, resp)
}

// runCheck runs check, turning a panic or a nil func into an error and
// bounding it by ctx even if check ignores ctx.
func runCheck(ctx context.Context, check func(context.Context) error) error {
	if check == nil {
		return errors.New("no check function")
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("check panicked: %v", p)
			}
		}()
		done <- check(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("check timed out: %w", ctx.Err())
	}
}

// Pinger is what RedisCheck needs of a Redis client; redis.UniversalClient
// has it.
type Pinger interface {
	Ping(ctx context.Context) *redis.StatusCmd
}

// RedisCheck is the readiness check of the shared Redis. It is required
// exactly when some use of Redis is configured fail-closed: then Redis being
// down refuses requests anyway, and a load balancer should send them to a
// replica that can reach its Redis.
func RedisCheck(client Pinger, fm config.FailureModes) ReadyCheck {
	c := ReadyCheck{
		Name: "redis",
		Check: func(ctx context.Context) error {
			if err := client.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("redis unreachable: %w", err)
			}
			return nil
		},
	}
	c.Required, c.Why = redisRequired(fm)
	return c
}

// RedisCheckLive is RedisCheck deciding Required from the config in force
// at each probe, so a reload that changes failure modes takes effect.
func RedisCheckLive(client Pinger, cfg func() *config.Config) ReadyCheck {
	c := RedisCheck(client, config.FailureModes{})
	c.Policy = func() (bool, string) {
		cur := cfg()
		if cur == nil {
			return false, "no config loaded"
		}
		return redisRequired(cur.FailureModes)
	}
	return c
}

// redisRequired says whether some use of Redis is fail-closed, and which.
func redisRequired(fm config.FailureModes) (bool, string) {
	var closed []string
	for _, u := range []struct {
		name string
		mode config.FailureMode
	}{
		{"budget", fm.Budget},
		{"reservation", fm.Reservation},
		{"breaker_sync", fm.BreakerSync},
		// The rate-limit service counts in Redis: with Redis down it
		// errors, and Envoy refuses when its failure mode is closed.
		{"ratelimit", fm.RateLimit},
	} {
		if u.mode == config.FailClosed {
			closed = append(closed, "failure_modes."+u.name+"=closed")
		}
	}
	if len(closed) > 0 {
		return true, "required: " + strings.Join(closed, ", ")
	}
	return false, "not required: every Redis use is fail-open"
}
