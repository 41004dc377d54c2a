package pricing

import (
	"math"
	"testing"
)

// TestParseMoneyRange: amounts beyond Money's range are errors, never a
// wrapped value, and every String form parses back.
func TestParseMoneyRange(t *testing.T) {
	tests := []struct {
		in   string
		want Money
		ok   bool
	}{
		{"9223372036.854775807", math.MaxInt64, true},
		{"-9223372036.854775808", math.MinInt64, true},
		{"-9223372036.854775807", -math.MaxInt64, true},
		{"9223372036.854775808", 0, false},
		{"9223372036.999999999", 0, false},
		{"9223372037", 0, false},
		{"-9223372036.854775809", 0, false},
		{"99999999999999999999", 0, false},
		{"  1.5 ", 1_500_000_000, true},
		{"-0.000000001", -1, true},
		{"7", 7 * NanosPerUnit, true},
		// strconv takes signs; an amount does not.
		{"--5", 0, false},
		{"-+5", 0, false},
		{"+5", 0, false},
		{"1.+5", 0, false},
		{"1.-5", 0, false},
		{"1.", 1 * NanosPerUnit, true},
		{"1e3", 0, false},
		{"-", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseMoney(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseMoney(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for _, m := range []Money{math.MaxInt64, math.MinInt64, math.MinInt64 + 1, -1, 0} {
		if back, err := ParseMoney(m.String()); err != nil || back != m {
			t.Errorf("ParseMoney(%s) = %d, %v; want %d", m, back, err, m)
		}
	}
}

// TestFromFloatSaturates: amounts beyond Money's range saturate instead of
// becoming MinInt64 (a huge budget would refuse everything).
func TestFromFloatSaturates(t *testing.T) {
	tests := []struct {
		in   float64
		want Money
	}{
		{12.5, 12_500_000_000},
		{-0.25, -250_000_000},
		{9.2e9, 9_200_000_000 * NanosPerUnit},
		{9.3e9, math.MaxInt64},
		{1e12, math.MaxInt64}, // the largest monthly budget config accepts
		{math.MaxFloat64, math.MaxInt64},
		{math.Inf(1), math.MaxInt64},
		{-1e12, math.MinInt64},
		{math.Inf(-1), math.MinInt64},
		{math.NaN(), 0},
	}
	for _, tc := range tests {
		if got := FromFloat(tc.in); got != tc.want {
			t.Errorf("FromFloat(%g) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
