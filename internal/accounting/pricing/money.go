package pricing

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// NanosPerUnit is how many Money units make one unit of the currency.
const NanosPerUnit = 1_000_000_000

// Money is an amount in nano-units of the configured currency (1e-9 USD when
// the currency is USD). int64 holds about 9.2 billion currency units.
type Money int64

// FromFloat converts a configured amount (e.g. a monthly budget) to Money,
// rounding to the nearest nano-unit. Amounts beyond Money's range saturate
// (a budget of 1e12 is as good as unlimited, not negative: converting such
// a float to int64 is undefined and gave MinInt64); NaN is 0.
func FromFloat(v float64) Money {
	r := math.Round(v * NanosPerUnit)
	switch {
	case r >= math.MaxInt64: // float64(MaxInt64) is 2^63, out of range
		return math.MaxInt64
	case r <= math.MinInt64:
		return math.MinInt64
	case r != r: // NaN
		return 0
	}
	return Money(r)
}

// Float is the amount in currency units, for gauges and display only.
func (m Money) Float() float64 { return float64(m) / NanosPerUnit }

// String formats the amount exactly, e.g. "12.000350000" for 12.00035.
func (m Money) String() string {
	neg := m < 0
	u := uint64(m)
	if neg {
		u = uint64(-m)
	}
	s := fmt.Sprintf("%d.%09d", u/NanosPerUnit, u%NanosPerUnit)
	if neg {
		return "-" + s
	}
	return s
}

// Short formats with 6 decimals (micro-units), rounded half away from zero,
// for tables.
func (m Money) Short() string {
	q := int64(m)
	r := q % 1000
	q /= 1000
	if r >= 500 {
		q++
	} else if r <= -500 {
		q--
	}
	neg := q < 0
	if neg {
		q = -q
	}
	s := fmt.Sprintf("%d.%06d", q/1_000_000, q%1_000_000)
	if neg {
		return "-" + s
	}
	return s
}

// ParseMoney parses the String form: an optional '-', digits, and up to 9
// decimals. An amount outside Money's range is an error, not a wrapped
// value.
func ParseMoney(s string) (Money, error) {
	s = strings.TrimSpace(s)
	digits := strings.TrimPrefix(s, "-")
	neg := len(digits) < len(s)
	whole, frac, _ := strings.Cut(digits, ".")
	if whole == "" || len(frac) > 9 || !isDigits(whole) || !isDigits(frac) {
		return 0, fmt.Errorf("pricing: invalid amount %q", s)
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	limit := uint64(math.MaxInt64)
	if neg {
		limit++ // -2^63 is MinInt64, which String prints
	}
	if err != nil || w > limit/NanosPerUnit {
		return 0, fmt.Errorf("pricing: amount %q out of range", s)
	}
	var f uint64
	if frac != "" {
		f, _ = strconv.ParseUint(frac+strings.Repeat("0", 9-len(frac)), 10, 64) // at most 9 digits
	}
	n := w*NanosPerUnit + f
	if n > limit {
		return 0, fmt.Errorf("pricing: amount %q out of range", s)
	}
	if neg {
		return Money(-n), nil // two's complement: -2^63 included
	}
	return Money(n), nil
}

// isDigits reports whether s is ASCII digits only ("" included): strconv
// would also take a sign, so "1.+5" would read as 1.05.
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// MarshalJSON writes the exact decimal string, so JSON consumers never see
// a rounded float.
func (m Money) MarshalJSON() ([]byte, error) { return json.Marshal(m.String()) }

// UnmarshalJSON reads the decimal string form.
func (m *Money) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("pricing: money: %w", err)
	}
	v, err := ParseMoney(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}
