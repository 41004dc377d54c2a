// Package grafana holds the Grafana dashboard built on swarmgate's metrics.
// Its test keeps the dashboard honest: valid JSON, and every metric name a
// PromQL expression uses is one some swarmgate package exports.
package grafana

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/telemetry"
)

var (
	metricName = regexp.MustCompile(`^swarmgate_[a-z0-9_]+$`)
	promqlName = regexp.MustCompile(`\bswarmgate_[a-zA-Z0-9_]+`)
)

// exportedMetrics is the one list of our metric names: every string literal
// in the module's non-test Go files that is a full swarmgate_ metric name
// (each package declares its families with literal names in its own
// metrics.go).
func exportedMetrics(t *testing.T) map[string]string {
	t.Helper()
	root := moduleRoot(t)
	names := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "vendor", "node_modules", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil // someone's work in progress; its names are not exported yet
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && metricName.MatchString(s) {
				names[s] = rel
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatalf("scanning sources: %v", err)
	}
	return names
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob("*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in deploy/grafana: %v", err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		dec := json.NewDecoder(strings.NewReader(string(data)))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: not valid JSON: %v", f, err)
		}
		out[f] = d
	}
	return out
}

// expressions returns every PromQL expression of d with where it is.
func expressions(d dashboard) map[string]string {
	exprs := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs[p.Title+"/"+tg.RefID] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		switch q := v.Query.(type) {
		case string:
			exprs["variable "+v.Name] = q
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				exprs["variable "+v.Name] = s
			}
		}
	}
	for i, a := range d.Annotations.List {
		exprs["annotation "+strconv.Itoa(i)] = a.Expr
	}
	return exprs
}

func TestDashboardUsesOnlyExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	// The scan must see this module's own families, or it proves nothing.
	for _, n := range []string{telemetry.MetricRequests, telemetry.MetricTimeToFirstToken, telemetry.MetricRedisErrors} {
		if _, ok := exported[n]; !ok {
			t.Fatalf("source scan missed %s: the check is broken", n)
		}
	}
	for file, d := range loadDashboards(t) {
		used := map[string]bool{}
		for where, expr := range expressions(d) {
			for _, name := range promqlName.FindAllString(expr, -1) {
				used[name] = true
				if _, ok := exported[name]; ok {
					continue
				}
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				if _, ok := exported[base]; ok && base != name {
					continue
				}
				t.Errorf("%s: %s uses %s, which no package exports", file, where, name)
			}
		}
		// The dashboard shows every data-path family telemetry defines.
		for _, n := range []string{
			telemetry.MetricRequests, telemetry.MetricRequestDuration, telemetry.MetricPhaseDuration,
			telemetry.MetricTimeToFirstToken, telemetry.MetricTimePerOutputTok, telemetry.MetricTokens,
			telemetry.MetricCost, telemetry.MetricRateLimitDecision, telemetry.MetricRedisErrors,
		} {
			found := false
			for u := range used {
				if u == n || strings.HasPrefix(u, n+"_") {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no panel shows %s", file, n)
			}
		}
	}
}

func TestDashboardStructure(t *testing.T) {
	for file, d := range loadDashboards(t) {
		if d.UID == "" || d.Title == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
			t.Errorf("%s: uid %q title %q schemaVersion %d panels %d", file, d.UID, d.Title, d.SchemaVersion, len(d.Panels))
		}
		ids := map[int]bool{}
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				if ids[p.ID] {
					t.Errorf("%s: panel id %d used twice", file, p.ID)
				}
				ids[p.ID] = true
				if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
					t.Errorf("%s: panel %q has a bad gridPos", file, p.Title)
				}
				if p.Type != "row" {
					if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
						t.Errorf("%s: panel %q does not use the $datasource variable", file, p.Title)
					}
					if len(p.Targets) == 0 {
						t.Errorf("%s: panel %q has no query", file, p.Title)
					}
				}
				refs := map[string]bool{}
				for _, tg := range p.Targets {
					if tg.RefID == "" || refs[tg.RefID] || strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("%s: panel %q: target %q empty or duplicated", file, p.Title, tg.RefID)
					}
					refs[tg.RefID] = true
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		for where, expr := range expressions(d) {
			if err := balanced(expr); err != "" {
				t.Errorf("%s: %s: %s in %q", file, where, err, expr)
			}
		}
	}
}

// balanced is a cheap PromQL sanity check: brackets and quotes pair up.
func balanced(expr string) string {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inQuote := false
	for _, r := range expr {
		switch {
		case r == '"':
			inQuote = !inQuote
		case inQuote:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return "unbalanced " + string(r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if inQuote {
		return "unterminated string"
	}
	if len(stack) > 0 {
		return "unclosed " + string(stack[len(stack)-1])
	}
	return ""
}

// TestListExportedMetrics prints the list with -v, for the docs.
func TestListExportedMetrics(t *testing.T) {
	names := exportedMetrics(t)
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		t.Logf("%-55s %s", n, names[n])
	}
	if len(sorted) == 0 {
		t.Fatal("no metric names found")
	}
}
