package config

import (
	"errors"
	"math"
	"testing"
)

// TestFloatRangesRefuseNaN: every float setting with a range refuses NaN
// and infinities, which a range check written "x < lo || x > hi" lets
// through (NaN fails every comparison).
func TestFloatRangesRefuseNaN(t *testing.T) {
	for _, tc := range []struct {
		path string
		set  func(*Config, float64)
	}{
		{"request.bytes_per_token", func(c *Config, x float64) { c.Request.BytesPerToken = x }},
		{"breaker.jitter", func(c *Config, x float64) { c.Breaker.Jitter = x }},
		{"retry.budget_percent", func(c *Config, x float64) { c.Retry.BudgetPercent = x }},
		{"telemetry.sample_ratio", func(c *Config, x float64) { c.Telemetry.SampleRatio = x }},
		{"models[0].targets[0].price.input_per_mtok", func(c *Config, x float64) { c.Models[0].Targets[0].Price.InputPerMTok = x }},
		{"models[0].targets[0].price.output_per_mtok", func(c *Config, x float64) { c.Models[0].Targets[0].Price.OutputPerMTok = x }},
		{"models[0].targets[0].price.cached_input_per_mtok", func(c *Config, x float64) { c.Models[0].Targets[0].Price.CachedInputPerMTok = x }},
		{"models[0].targets[0].price.reasoning_per_mtok", func(c *Config, x float64) { c.Models[0].Targets[0].Price.ReasoningPerMTok = x }},
		{"models[0].targets[0].price.cache_write_input_per_mtok", func(c *Config, x float64) { c.Models[0].Targets[0].Price.CacheWriteInputPerMTok = x }},
		{"tenants[0].budget.monthly", func(c *Config, x float64) { c.Tenants[0].Budget.Monthly = x }},
		{"tenants[0].budget.alerts[0]", func(c *Config, x float64) { c.Tenants[0].Budget.Alerts = []float64{x} }},
	} {
		for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			t.Run(tc.path+"="+formatFloat(x), func(t *testing.T) {
				c := programmaticConfig()
				tc.set(c, x)
				err := c.Prepare(Options{LookupEnv: lookupTestEnv})
				var errs Errors
				if !errors.As(err, &errs) {
					t.Fatalf("Prepare: %v, want an error on %s", err, tc.path)
				}
				for _, e := range errs {
					if e.Path == tc.path {
						return
					}
				}
				t.Fatalf("no error on %s in:\n%v", tc.path, err)
			})
		}
	}
}

func formatFloat(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case x > 0:
		return "+Inf"
	default:
		return "-Inf"
	}
}
