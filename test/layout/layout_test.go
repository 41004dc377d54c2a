// Package layout checks the floor plan: the top-level folders are the ones
// docs/architecture.md names, the domain packages under internal/ hold
// policy only, importing no gRPC or Envoy package, so each can be read and
// tested without a stream, and the data path's functions stay short.
package layout

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/swarmgate/swarmgate"

// topLevel is every folder allowed at the repository root.
var topLevel = []string{
	"cmd", "deploy", "docs", "envoy", "extproc", "internal", "protos", "ratelimit", "scripts", "test", "xds",
}

// transport lists the internal packages whose job is a transport or a
// process: they may import gRPC or Envoy's types; every other internal
// package is policy and may not.
var transport = []string{
	"internal/gateway",     // starts every role's server
	"internal/gatewaytest", // runs internal/gateway and writes Envoy's bootstrap for the end-to-end suites
	"internal/trust",       // TLS and peer identity for the gRPC listeners
}

// forbidden are the import prefixes policy packages may not use.
var forbidden = []string{
	"google.golang.org/grpc",
	"github.com/envoyproxy/",
	module + "/protos/",
	module + "/extproc",
	module + "/xds",
}

func TestTopLevelFolders(t *testing.T) {
	entries, err := os.ReadDir("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "bin" {
			continue
		}
		if !slices.Contains(topLevel, e.Name()) {
			t.Errorf("top-level folder %q is not in the floor plan (docs/architecture.md); domain packages go under internal/", e.Name())
		}
	}
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func TestPolicyPackagesImportNoTransport(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./internal/...")
	cmd.Dir = "../.."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(out)
	n := 0
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		if slices.ContainsFunc(transport, func(tp string) bool { return rel == tp || strings.HasPrefix(rel, tp+"/") }) {
			continue
		}
		for _, imp := range p.Imports {
			for _, f := range forbidden {
				if strings.HasPrefix(imp, f) {
					t.Errorf("%s imports %s: policy packages under internal/ take no gRPC, Envoy or service-package imports", rel, imp)
				}
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("go list found %d packages under internal/, want the domain packages", n)
	}
}

// decision lists the packages that decide a request's fate (admission,
// routing, keys, accounting): not even what they import may reach gRPC or
// Envoy's types, so each builds and tests without a transport. (An
// operation name once pulled the telemetry exporters, and with them gRPC,
// into the admission steps.)
var decision = []string{
	"./extproc/admit", "./extproc/family", "./internal/admission", "./internal/keypool", "./internal/routing",
	"./internal/chatreq", "./internal/accounting/...", "./internal/subkey",
}

func TestDecisionPackagesDependOnNoTransport(t *testing.T) {
	for _, p := range decision {
		cmd := exec.Command("go", "list", "-deps", p)
		cmd.Dir = "../.."
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", p, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 2 {
			t.Fatalf("go list -deps %s: %d packages", p, len(deps))
		}
		for _, d := range deps {
			if d == "google.golang.org/grpc" || strings.HasPrefix(d, "github.com/envoyproxy/") {
				t.Errorf("%s depends on %s", p, d)
			}
		}
	}
}

// dataPath lists the folders whose code runs for every request or
// attempt: no function there may grow past maxFuncLines, so each step
// reads on one screen.
var dataPath = []string{
	"extproc", "internal/routing", "internal/jsonscan", "internal/sse", "internal/chatreq",
	"internal/accounting/usage", "internal/subkey", "internal/keypool", "internal/admission",
}

const maxFuncLines = 80

func TestDataPathFunctionsAreShort(t *testing.T) {
	fset := token.NewFileSet()
	n := 0
	for _, dir := range dataPath {
		err := filepath.WalkDir(filepath.Join("../..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				n++
				if lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; lines > maxFuncLines {
					t.Errorf("%s: %s is %d lines; split it into steps (at most %d)", strings.TrimPrefix(path, "../../"), fd.Name.Name, lines, maxFuncLines)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 100 {
		t.Fatalf("read %d functions on the data path, want the whole of it", n)
	}
}
