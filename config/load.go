package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
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
	SkipSecrets bool
}

// Load reads, parses and validates the config file at path.
func Load(path string, opts Options) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(data, path, opts)
}

// Parse parses and validates a config. name is used in error messages. The
// returned error is an Errors value when the problems are in the content.
func Parse(data []byte, name string, opts Options) (*Config, error) {
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: name, Msg: "config is empty"}}
		}
		return nil, Errors{yamlError(name, err)}
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, Errors{{File: name, Line: root.Line, Msg: "config must be a YAML mapping"}}
	}
	var c Config
	if err := decodeStrict(data, &c); err != nil {
		return nil, Errors{yamlError(name, err)}
	}
	c.Source = name
	c.applyDefaults()
	errs := c.validate(opts)
	for _, e := range errs {
		e.File = name
		if e.Line == 0 {
			e.Line = lineOf(root.Content[0], e.Path)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	c.buildIndex()
	return &c, nil
}

func decodeStrict(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	return dec.Decode(c)
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
	b.WriteString(": ")
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

// yamlError turns a yaml.v3 error ("yaml: line 3: ...") into an Error.
func yamlError(name string, err error) *Error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		return &Error{File: name, Line: lineFromMsg(te.Errors[0]), Msg: stripLine(te.Errors[0])}
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return &Error{File: name, Line: lineFromMsg(msg), Msg: stripLine(msg)}
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

// lineOf finds the line of a field path such as "backends[1].keys[0].secret"
// in the YAML tree, or of its deepest existing ancestor.
func lineOf(n *yaml.Node, path string) int {
	line := n.Line
	for _, seg := range splitPath(path) {
		switch {
		case seg.index >= 0 && n.Kind == yaml.SequenceNode && seg.index < len(n.Content):
			n = n.Content[seg.index]
		case seg.index < 0 && n.Kind == yaml.MappingNode:
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == seg.key {
					line = n.Content[i].Line
					n, found = n.Content[i+1], true
					break
				}
			}
			if !found {
				return line
			}
			continue
		default:
			return line
		}
		line = n.Line
	}
	return line
}

type pathSeg struct {
	key   string
	index int
}

func splitPath(path string) []pathSeg {
	var segs []pathSeg
	for _, part := range strings.Split(path, ".") {
		if part == "" {
			continue
		}
		key, rest, _ := strings.Cut(part, "[")
		if key != "" {
			segs = append(segs, pathSeg{key: key, index: -1})
		}
		for rest != "" {
			num, after, _ := strings.Cut(rest, "]")
			if i, err := strconv.Atoi(num); err == nil {
				segs = append(segs, pathSeg{index: i})
			} else {
				segs = append(segs, pathSeg{key: num, index: -1}) // map key: model_limits[gpt-4o]
			}
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return segs
}
