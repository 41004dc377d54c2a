package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Secret is a reference to a credential, "env:NAME" or "file:PATH". The
// resolved value is held unexported and never printed, marshalled or logged:
// every textual form of a Secret is its reference.
type Secret struct {
	ref   string
	value string
}

// SecretFromValue builds a resolved secret (tests, programmatic configs).
func SecretFromValue(ref, value string) Secret { return Secret{ref: ref, value: value} }

// Ref is the reference as written, e.g. "env:OPENAI_KEY_1".
func (s Secret) Ref() string { return s.ref }

// Value is the resolved credential. Callers must not log it.
func (s Secret) Value() string { return s.value }

// IsZero reports whether no reference was given.
func (s Secret) IsZero() bool { return s.ref == "" }

// String returns the reference, never the value.
func (s Secret) String() string { return s.ref }

// GoString returns the reference, never the value (so %#v is safe too).
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.ref) }

// MarshalYAML writes the reference.
func (s Secret) MarshalYAML() (any, error) { return s.ref, nil }

// MarshalJSON writes the reference.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf("%q", s.ref)), nil }

// MarshalText writes the reference (slog, encoding/* use it).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.ref), nil }

// UnmarshalYAML reads the reference; resolution happens in Parse.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	var ref string
	if err := n.Decode(&ref); err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	s.ref = strings.TrimSpace(ref)
	return nil
}

var errInlineSecret = errors.New(`must be a reference "env:NAME" or "file:PATH"; inline secrets are not accepted`)

// resolve looks the secret up. The error never contains the value.
func (s *Secret) resolve(env func(string) (string, bool)) error {
	kind, name, ok := strings.Cut(s.ref, ":")
	if !ok || name == "" {
		return errInlineSecret
	}
	var v string
	switch kind {
	case "env":
		val, found := env(name)
		if !found {
			return fmt.Errorf("environment variable %s is not set", name)
		}
		v = val
	case "file":
		b, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("reading secret file: %w", unwrapPathError(err))
		}
		// Files usually end in one newline; strip exactly trailing line ends.
		v = strings.TrimRight(string(b), "\r\n")
	default:
		return errInlineSecret
	}
	if v == "" {
		return errors.New("resolves to an empty value")
	}
	if strings.ContainsAny(v, " \t\r\n") {
		return errors.New("resolved value contains whitespace or a newline")
	}
	s.value = v
	return nil
}

// unwrapPathError keeps the path and reason of a file error but never file
// content (os errors never include content; this only shortens the message).
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// ResolveSecret resolves a reference "env:NAME" or "file:PATH" outside a
// config (flags of `swarmgate mock-upstream`, tools). lookupEnv defaults to
// os.LookupEnv. The error never contains the value.
func ResolveSecret(ref string, lookupEnv func(string) (string, bool)) (Secret, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	s := Secret{ref: strings.TrimSpace(ref)}
	if err := s.resolve(lookupEnv); err != nil {
		return Secret{}, fmt.Errorf("secret %s: %w", s.ref, err)
	}
	return s, nil
}
