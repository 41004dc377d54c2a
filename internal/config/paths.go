package config

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Field paths look like backends[1].keys[0].secret; map entries are
// written in brackets: tenants[0].model_limits[gpt-4.1].rpm.

// walkBudget bounds the nodes one walk visits, so aliases cannot make a
// walk explode (yaml.v3's own alias limit only guards Decode).
const walkBudget = 200000

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// walker visits a YAML tree alongside the Go type it decodes into.
type walker struct {
	budget int
	// key is called for every mapping key of a struct or map, with the
	// field's path and type (nil type: not a known field).
	key func(k, v *yaml.Node, path string, ft reflect.Type)
}

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	if n == nil || w.budget <= 0 {
		return
	}
	w.budget--
	if n.Kind == yaml.AliasNode {
		w.walk(n.Alias, t, path)
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				w.walkMerge(v, t, path)
				continue
			}
			p := joinPath(path, k.Value)
			ft, ok := fieldType(t, k.Value)
			if !ok {
				w.key(k, v, p, nil)
				continue
			}
			w.key(k, v, p, ft)
			w.walk(v, ft, p)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := path + "[" + k.Value + "]"
			w.key(k, v, p, t.Elem())
			w.walk(v, t.Elem(), p)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, e := range n.Content {
			w.walk(e, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		}
	}
}

func (w *walker) walkMerge(v *yaml.Node, t reflect.Type, path string) {
	v = resolveAlias(v)
	if v == nil {
		return
	}
	if v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			w.walk(e, t, path)
		}
		return
	}
	w.walk(v, t, path)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlFields lists a struct's YAML field names and types.
func yamlFields(t reflect.Type) ([]string, map[string]reflect.Type) {
	var names []string
	types := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		names = append(names, name)
		types[name] = f.Type
	}
	return names, types
}

func fieldType(t reflect.Type, name string) (reflect.Type, bool) {
	_, types := yamlFields(t)
	ft, ok := types[name]
	return ft, ok
}

// checkFields reports every mapping key that is not a field of the struct
// it decodes into, with its path, line and the closest known name.
func checkFields(doc *yaml.Node, file string) Errors {
	var errs Errors
	w := &walker{budget: walkBudget}
	w.key = func(k, _ *yaml.Node, path string, ft reflect.Type) {
		if ft != nil {
			return
		}
		errs = append(errs, &Error{File: file, Line: k.Line, Path: path, Msg: unknownFieldMsg(k.Value, path)})
	}
	w.walk(doc, reflect.TypeFor[Config](), "")
	return errs
}

func unknownFieldMsg(name, path string) string {
	t := typeAtPath(parentPath(path))
	if t == nil {
		return fmt.Sprintf("unknown field %q", name)
	}
	names, _ := yamlFields(t)
	if s := closest(name, names); s != "" {
		return fmt.Sprintf("unknown field %q (did you mean %q?)", name, s)
	}
	sort.Strings(names)
	return fmt.Sprintf("unknown field %q; known fields: %s", name, strings.Join(names, ", "))
}

func parentPath(path string) string {
	segs := splitPath(path)
	if len(segs) == 0 {
		return ""
	}
	return formatPath(segs[:len(segs)-1])
}

// typeAtPath is the struct type a path points into (nil if not a struct).
func typeAtPath(path string) reflect.Type {
	t := reflect.TypeFor[Config]()
	for _, seg := range splitPath(path) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case seg.index >= 0 && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
			t = t.Elem()
		case seg.bracket && t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			ft, ok := fieldType(t, seg.key)
			if !ok {
				return nil
			}
			t = ft
		default:
			return nil
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return t
}

// closest returns the known name within edit distance 2 of name.
func closest(name string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(name), n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// findPath returns the path of the first key or value node that matches.
func findPath(doc *yaml.Node, match func(*yaml.Node) bool) string {
	found := ""
	w := &walker{budget: walkBudget}
	w.key = func(k, v *yaml.Node, path string, _ reflect.Type) {
		if found != "" {
			return
		}
		if match(k) || match(v) {
			found = path
		}
	}
	w.walk(doc, reflect.TypeFor[Config](), "")
	if found == "" {
		// Sequence elements (e.g. redis.addrs[1]) are not mapping keys.
		found = findSeqPath(doc, "", match, new(walkBudget))
	}
	return found
}

func findSeqPath(n *yaml.Node, path string, match func(*yaml.Node) bool, budget *int) string {
	if n == nil || *budget <= 0 {
		return ""
	}
	*budget--
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if p := findSeqPath(n.Content[i+1], joinPath(path, n.Content[i].Value), match, budget); p != "" {
				return p
			}
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			if match(e) {
				return p
			}
			if q := findSeqPath(e, p, match, budget); q != "" {
				return q
			}
		}
	}
	return ""
}

var keyLineRE = regexp.MustCompile(`^(\s*(?:-\s+)?)([A-Za-z0-9_.-]+):`)

// locateSyntaxError finds the line a YAML syntax error starts on and the
// field it is in. yaml.v3 sometimes reports the line of the enclosing
// construct (zero-based), so the first of the next few prefixes of the file
// that fails to parse is taken as the line; the path is the last key before
// it, or the key on that line when it is a sibling of that key.
func locateSyntaxError(data []byte, reported int) (int, string) {
	lines := strings.Split(string(data), "\n")
	line := min(max(reported, 1), len(lines))
	for l := max(1, line-1); l <= min(len(lines), line+3); l++ {
		var n yaml.Node
		if yaml.Unmarshal([]byte(strings.Join(lines[:l], "\n")), &n) != nil {
			line = l
			break
		}
	}
	var root yaml.Node
	if line < 2 || yaml.Unmarshal([]byte(strings.Join(lines[:line-1], "\n")), &root) != nil || len(root.Content) == 0 {
		return line, ""
	}
	best, bestLine, bestCol := "", 0, 0
	w := &walker{budget: walkBudget}
	w.key = func(k, _ *yaml.Node, path string, _ reflect.Type) {
		if k.Line >= bestLine {
			best, bestLine, bestCol = path, k.Line, k.Column
		}
	}
	w.walk(root.Content[0], reflect.TypeFor[Config](), "")
	if line-1 < len(lines) {
		if m := keyLineRE.FindStringSubmatch(lines[line-1]); m != nil && len(m[1])+1 == bestCol && best != "" {
			return line, joinPath(parentPath(best), m[2])
		}
	}
	return line, best
}

// lineOf finds the line of a field path such as "backends[1].keys[0].secret"
// in the YAML tree, or of its deepest existing ancestor.
func lineOf(n *yaml.Node, path string) int {
	line := n.Line
	for _, seg := range splitPath(path) {
		n = resolveAlias(n)
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
	key     string
	index   int  // >= 0 for a sequence index
	bracket bool // written in brackets (index or map key)
}

// splitPath splits a field path; bracketed map keys may contain dots.
func splitPath(path string) []pathSeg {
	var segs []pathSeg
	for i := 0; i < len(path); {
		switch path[i] {
		case '.':
			i++
		case '[':
			j := strings.IndexByte(path[i:], ']')
			if j < 0 {
				j = len(path) - i
			}
			inner := path[i+1 : i+j]
			if n, err := strconv.Atoi(inner); err == nil && n >= 0 {
				segs = append(segs, pathSeg{index: n, bracket: true})
			} else {
				segs = append(segs, pathSeg{key: inner, index: -1, bracket: true})
			}
			i += j + 1
		default:
			j := strings.IndexAny(path[i:], ".[")
			if j < 0 {
				j = len(path) - i
			}
			segs = append(segs, pathSeg{key: path[i : i+j], index: -1})
			i += j
		}
	}
	return segs
}

func formatPath(segs []pathSeg) string {
	var b strings.Builder
	for _, s := range segs {
		switch {
		case s.index >= 0:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case s.bracket:
			b.WriteString("[" + s.key + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		}
	}
	return b.String()
}
