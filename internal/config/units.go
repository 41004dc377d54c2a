package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as "30s", "5m" or "1h30m" in YAML.
type Duration struct{ time.Duration }

// D returns the duration.
func (d Duration) D() time.Duration { return d.Duration }

// UnmarshalYAML accepts Go duration strings.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError(n, "a duration must be a string such as 500ms, 30s or 5m")
	}
	s := n.Value
	if s == "0" {
		d.Duration = 0
		return nil
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return typeError(n, "invalid duration %q (use e.g. 500ms, 30s, 5m)", s)
	}
	d.Duration = v
	return nil
}

// MarshalYAML writes the Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.Duration.String(), nil }

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(d.Duration.String())), nil
}

// ByteSize is a size written as 1048576, "512KiB", "8MiB" or "1GiB".
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// ParseByteSize parses a size with an optional binary or decimal unit.
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (use e.g. 65536, 512KiB, 8MiB)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return ByteSize(n * mult), nil
}

// UnmarshalYAML accepts a number of bytes or a string with a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError(n, "a size must be a number of bytes or a string such as 512KiB or 8MiB")
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return typeError(n, "%v", err)
	}
	*b = v
	return nil
}

// String formats the size with the largest exact binary unit.
func (b ByteSize) String() string {
	for _, u := range byteUnits[:3] {
		if b != 0 && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalJSON writes the size as a number of bytes.
func (b ByteSize) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, int64(b), 10), nil }

// MarshalYAML writes the size with its unit.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }
