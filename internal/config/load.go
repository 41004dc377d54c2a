package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML is the embedded default configuration `swarmgate serve` runs
// when no --config is given.
func DefaultYAML() []byte { return bytes.Clone(defaultYAML) }

// Options change how a config is loaded.
type Options struct {
	// LookupEnv resolves env: secrets; os.LookupEnv when nil.
	LookupEnv func(string) (string, bool)
	// SkipSecrets leaves secrets unresolved (validate on a machine without
	// the credentials, the control plane which never needs key values).
	// The form of every reference is still checked. Virtual keys given by
	// secret instead of hash are then not indexed.
	SkipSecrets bool
	// ResolveAdminToken resolves admin.token even with SkipSecrets: every
	// process serving the admin API needs it, the control plane included.
	ResolveAdminToken bool
	// ResolveRedisPassword resolves redis.password even with SkipSecrets:
	// every process that opens Redis needs it (the control plane, the
	// rate-limit service, `swarmgate usage`).
	ResolveRedisPassword bool
	// BaseDir is where relative file: secret paths are resolved from. Load
	// sets it to the config file's directory when empty; otherwise relative
	// paths are relative to the working directory.
	BaseDir string
	// Received marks a config that arrived over xDS: its listen addresses
	// are the control plane's file, not what this process binds, so
	// listener security is not checked against them.
	Received bool

	// checkListeners refuses gRPC listeners on non-loopback addresses
	// without TLS: set by Parse, whose file names the addresses this
	// process binds (not by Prepare on a config received over xDS).
	checkListeners bool
}

// MaxConfigBytes bounds the size of a config file.
const MaxConfigBytes = 16 << 20

// Load reads, parses and validates the config file at path.
func Load(path string, opts Options) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	if opts.BaseDir == "" {
		opts.BaseDir = filepath.Dir(path)
	}
	return Parse(data, path, opts)
}

// Parse parses and validates a config. name is used in error messages. The
// returned error is an Errors value when the problems are in the content;
// every Error carries the file, line and field path.
//
// Parse decodes the YAML over the zero-meaningful defaults (unknown fields are errors), so a
// field set to zero stays zero; it fills weights that were left out with 1
// (an explicit weight 0 drains a key or target), then calls Prepare.
func Parse(data []byte, name string, opts Options) (*Config, error) {
	doc, errs := parseDocument(data, name)
	if len(errs) > 0 {
		return nil, errs
	}
	var c Config
	c.prefill()
	errs = checkFields(doc, name)
	if err := doc.Decode(&c); err != nil {
		errs = append(errs, decodeErrors(doc, name, err)...)
	}
	if len(errs) > 0 {
		return nil, errs.sorted()
	}
	defaultOmittedWeights(doc, &c)
	c.Source = name
	opts.checkListeners = !opts.Received
	if err := c.Prepare(opts); err != nil {
		var es Errors
		if !errors.As(err, &es) {
			return nil, err
		}
		for _, e := range es {
			e.File = name
			if e.Line == 0 {
				e.Line = lineOf(doc, e.Path)
			}
		}
		return nil, es.sorted()
	}
	return &c, nil
}

// Prepare makes a Config built in code (for example rebuilt from its xDS
// form on an ext_proc replica) ready to use, exactly as Parse does for a
// file: it fills defaults, validates, resolves secrets that have no value
// yet (opts) and builds the lookup index. Zero fields take their default,
// except those where zero means something (weights: 0 is drained;
// retry.num_retries, retry.min_retry_concurrency, breaker.jitter,
// telemetry.sample_ratio, accounting.ledger_buffer): start from Defaults()
// to get those. On failure it returns Errors with field
// paths (no line numbers: there is no file) and the Config must not be
// used. Prepare may be called again after changing the Config.
func (c *Config) Prepare(opts Options) error {
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	c.applyDefaults()
	if errs := c.validate(opts); len(errs) > 0 {
		for _, e := range errs {
			if e.File == "" {
				e.File = c.Source
			}
		}
		return errs.sorted()
	}
	c.buildIndex()
	return nil
}

// parseDocument parses exactly one YAML document whose root is a mapping.
func parseDocument(data []byte, name string) (*yaml.Node, Errors) {
	if len(data) > MaxConfigBytes {
		return nil, Errors{{File: name, Line: 1, Msg: fmt.Sprintf("config is larger than %d bytes", MaxConfigBytes)}}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: name, Line: 1, Msg: "config is empty"}}
		}
		e := yamlError(name, err)
		e.Line, e.Path = locateSyntaxError(data, e.Line)
		if e.Path == "" {
			e.Path = "(document)"
		}
		return nil, Errors{e}
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, Errors{{File: name, Line: max(1, root.Line), Msg: "config must be a YAML mapping"}}
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		if err != nil {
			line = lineFromMsg(err.Error())
		}
		return nil, Errors{{File: name, Line: max(1, line), Msg: "more than one YAML document; a config is one document"}}
	}
	return root.Content[0], nil
}

// Error is one problem in a config, with where it is.
type Error struct {
	File string
	Line int
	Path string // field path, e.g. models[2].targets[0].backend
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one config.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// maxErrors bounds the problems reported for one config.
const maxErrors = 100

// sorted orders errors by line, then path, so output is stable, and cuts a
// very long list short.
func (es Errors) sorted() Errors {
	slices.SortStableFunc(es, func(a, b *Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return strings.Compare(a.Path, b.Path)
	})
	if len(es) > maxErrors {
		last := es[maxErrors-1]
		es = append(es[:maxErrors:maxErrors], &Error{File: last.File, Line: last.Line, Path: last.Path,
			Msg: fmt.Sprintf("and %d more problems", len(es)-maxErrors)})
	}
	return es
}

// yamlError turns a yaml.v3 error ("yaml: line 3: ...") into an Error.
func yamlError(name string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return &Error{File: name, Line: max(1, lineFromMsg(msg)), Msg: "YAML syntax error: " + stripLine(msg)}
}

// decodeErrors maps yaml.v3 type errors ("line 7: cannot unmarshal ...")
// and ours from custom unmarshalers ("line 7: column 12: ...") to Errors
// with the field path.
func decodeErrors(doc *yaml.Node, name string, err error) Errors {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		e := yamlError(name, err)
		e.Msg = strings.TrimPrefix(e.Msg, "YAML syntax error: ")
		return Errors{e}
	}
	var out Errors
	for _, msg := range te.Errors {
		line := lineFromMsg(msg)
		msg = stripLine(msg)
		col := 0
		if rest, ok := strings.CutPrefix(msg, "column "); ok {
			if i := strings.IndexByte(rest, ':'); i > 0 {
				col, _ = strconv.Atoi(rest[:i])
				msg = strings.TrimSpace(rest[i+1:])
			}
		}
		value := ""
		if i := strings.IndexByte(msg, '`'); i >= 0 {
			if j := strings.IndexByte(msg[i+1:], '`'); j >= 0 {
				value = strings.TrimSuffix(msg[i+1:i+1+j], "...")
			}
		}
		path := findPath(doc, func(n *yaml.Node) bool {
			if n.Line != line {
				return false
			}
			if col > 0 {
				return n.Column == col
			}
			return value == "" || strings.HasPrefix(n.Value, value)
		})
		out = append(out, &Error{File: name, Line: max(1, line), Path: path, Msg: msg})
	}
	return out
}

func lineFromMsg(msg string) int {
	msg = strings.TrimPrefix(msg, "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				return n
			}
		}
	}
	return 0
}

func stripLine(msg string) string {
	msg = strings.TrimPrefix(msg, "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			return strings.TrimSpace(rest[i+1:])
		}
	}
	return msg
}

// typeError is how custom unmarshalers report a bad value: yaml.v3 keeps
// decoding after a *yaml.TypeError (other errors abort without a line).
func typeError(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: column %d: ", n.Line, n.Column) + fmt.Sprintf(format, args...)}}
}

// defaultOmittedWeights sets weight 1 on keys and targets that do not
// mention weight, so an explicit 0 stays 0 (drained).
func defaultOmittedWeights(doc *yaml.Node, c *Config) {
	var has func(n *yaml.Node, key string) bool
	has = func(n *yaml.Node, key string) bool {
		n = resolveAlias(n)
		if n == nil || n.Kind != yaml.MappingNode {
			return false
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return true
			}
			if n.Content[i].Tag == "!!merge" && has(n.Content[i+1], key) {
				return true
			}
		}
		return false
	}
	items := func(n *yaml.Node, key string) []*yaml.Node {
		v := mappingValue(n, key)
		if v == nil || v.Kind != yaml.SequenceNode {
			return nil
		}
		return v.Content
	}
	for i, bn := range items(doc, "backends") {
		for j, kn := range items(resolveAlias(bn), "keys") {
			if i < len(c.Backends) && j < len(c.Backends[i].Keys) && !has(kn, "weight") {
				c.Backends[i].Keys[j].Weight = 1
			}
		}
	}
	for i, mn := range items(doc, "models") {
		for j, tn := range items(resolveAlias(mn), "targets") {
			if i < len(c.Models) && j < len(c.Models[i].Targets) && !has(tn, "weight") {
				c.Models[i].Targets[j].Weight = 1
			}
		}
	}
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	n = resolveAlias(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return resolveAlias(n.Content[i+1])
		}
	}
	return nil
}
