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
// rounding to the nearest nano-unit.
func FromFloat(v float64) Money {
	return Money(math.Round(v * NanosPerUnit))
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

// ParseMoney parses the String form (up to 9 decimals).
func ParseMoney(s string) (Money, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) > 9 || whole == "" {
		return 0, fmt.Errorf("pricing: invalid amount %q", s)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/NanosPerUnit {
		return 0, fmt.Errorf("pricing: invalid amount %q", s)
	}
	var f int64
	if frac != "" {
		f, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("pricing: invalid amount %q", s)
		}
	}
	m := Money(w*NanosPerUnit + f)
	if neg {
		m = -m
	}
	return m, nil
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
