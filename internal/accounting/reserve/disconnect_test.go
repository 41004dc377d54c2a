package reserve

import (
	"testing"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

func TestDisconnectUsage(t *testing.T) {
	res := Reservation{Prompt: 1000, MaxOutput: 500, Tokens: 1500}
	reported := &pricing.Usage{PromptTokens: 990, CompletionTokens: 120, TotalTokens: 1110}
	tests := []struct {
		name   string
		policy string
		cut    Cutoff
		want   pricing.Usage
	}{
		{"reported wins", BillReported, Cutoff{Reported: reported, DeliveredBytes: 4000}, *reported},
		{"reported falls back to delivered", BillReported, Cutoff{DeliveredBytes: 401},
			pricing.Usage{PromptTokens: 1000, CompletionTokens: 101, TotalTokens: 1101}},
		{"delivered ignores the report", BillDelivered, Cutoff{Reported: reported, DeliveredBytes: 8},
			pricing.Usage{PromptTokens: 1000, CompletionTokens: 2, TotalTokens: 1002}},
		{"delivered beyond max output is billed", BillDelivered, Cutoff{DeliveredBytes: 4000},
			pricing.Usage{PromptTokens: 1000, CompletionTokens: 1000, TotalTokens: 2000}},
		{"nothing delivered", BillReported, Cutoff{},
			pricing.Usage{PromptTokens: 1000, TotalTokens: 1000}},
		{"reserved", BillReserved, Cutoff{Reported: reported},
			pricing.Usage{PromptTokens: 1000, CompletionTokens: 500, TotalTokens: 1500}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DisconnectUsage(tc.policy, res, tc.cut, 4); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
