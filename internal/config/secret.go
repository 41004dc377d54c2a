package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Secret is a reference to a credential, "env:NAME" or "file:PATH". The
// resolved value is held unexported and never printed, marshalled or logged:
// every textual form of a Secret is its reference.
//
// The value sits behind a pointer so that even fmt's reflection fallback
// (bad verbs, fields reached through unexported ones) prints an address,
// never the credential.
type Secret struct {
	ref string
	val *secretValue
}

type secretValue struct {
	v    string
	file string // the absolute path a file: secret was read from
}

// SecretFromValue builds a resolved secret (tests, programmatic configs).
func SecretFromValue(ref, value string) Secret {
	return Secret{ref: ref, val: &secretValue{v: value}}
}

// SecretRef builds an unresolved secret from its reference ("env:NAME" or
// "file:PATH"); Prepare resolves it.
func SecretRef(ref string) Secret { return Secret{ref: strings.TrimSpace(ref)} }

// Ref is the reference as written, e.g. "env:OPENAI_KEY_1".
func (s Secret) Ref() string { return s.ref }

// Value is the resolved credential. Callers must not log it.
func (s Secret) Value() string {
	if s.val == nil {
		return ""
	}
	return s.val.v
}

// IsZero reports whether no reference was given.
func (s Secret) IsZero() bool { return s.ref == "" }

// String returns the reference, never the value.
func (s Secret) String() string { return s.ref }

// GoString returns the reference, never the value (so %#v is safe too).
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.ref) }

// Format prints the reference for every verb (%d or %x would otherwise
// print the struct fields, value included).
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = io.WriteString(f, s.GoString())
		return
	}
	if verb == 'q' {
		_, _ = io.WriteString(f, strconv.Quote(s.ref))
		return
	}
	_, _ = io.WriteString(f, s.ref)
}

// LogValue makes slog print the reference.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.ref) }

// MarshalYAML writes the reference.
func (s Secret) MarshalYAML() (any, error) { return s.ref, nil }

// MarshalJSON writes the reference.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.ref) }

// MarshalText writes the reference (slog, encoding/* use it).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.ref), nil }

// UnmarshalYAML reads the reference; resolution happens in Parse.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!null") {
		return typeError(n, `a secret must be a string "env:NAME" or "file:PATH"`)
	}
	s.ref, s.val = strings.TrimSpace(n.Value), nil
	return nil
}

var errInlineSecret = errors.New(`must be a reference "env:NAME" or "file:PATH"; inline secrets are not accepted`)

// checkRef checks the form of the reference without resolving it.
func (s *Secret) checkRef() error {
	kind, name, ok := strings.Cut(s.ref, ":")
	if !ok || name == "" || (kind != "env" && kind != "file") {
		return errInlineSecret
	}
	if kind == "env" && strings.ContainsAny(name, " \t\r\n=") {
		return errors.New("invalid environment variable name")
	}
	return nil
}

// resolve looks the secret up; relative file paths are taken from baseDir.
// The error never contains the value.
func (s *Secret) resolve(env func(string) (string, bool), baseDir string) error {
	if err := s.checkRef(); err != nil {
		return err
	}
	kind, name, ok := strings.Cut(s.ref, ":")
	if !ok || name == "" {
		return errInlineSecret
	}
	var v, file string
	switch kind {
	case "env":
		val, found := env(name)
		if !found {
			return fmt.Errorf("environment variable %s is not set", name)
		}
		v = val
	case "file":
		if baseDir != "" && !filepath.IsAbs(name) {
			name = filepath.Join(baseDir, name)
		}
		b, err := readSecretFile(name)
		if err != nil {
			return fmt.Errorf("reading secret file: %w", unwrapPathError(err))
		}
		v = fileSecretValue(b)
		if file, err = filepath.Abs(name); err != nil {
			return fmt.Errorf("reading secret file: %w", err)
		}
	default:
		return errInlineSecret
	}
	if v == "" {
		return errors.New("resolves to an empty value")
	}
	if strings.ContainsFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return errors.New("resolved value contains whitespace, a newline or a control character")
	}
	if !utf8.ValidString(v) {
		return errors.New("resolved value is not valid UTF-8")
	}
	s.val = &secretValue{v: v, file: file}
	return nil
}

// fileSecretValue is a secret file's value: files usually end in one
// newline, so exactly the trailing line ends are stripped (and a UTF-8
// byte-order mark some editors write).
func fileSecretValue(b []byte) string {
	return strings.TrimPrefix(strings.TrimRight(string(b), "\r\n"), "\uFEFF")
}

// maxSecretFileBytes bounds a secret file: keys are short, and a path such
// as /dev/zero must not hang a config load.
const maxSecretFileBytes = 64 << 10

func readSecretFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSecretFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxSecretFileBytes)
	}
	return b, nil
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
	if err := s.resolve(lookupEnv, ""); err != nil {
		return Secret{}, fmt.Errorf("secret %s: %w", s.ref, err)
	}
	return s, nil
}
