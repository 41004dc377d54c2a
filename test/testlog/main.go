// Command testlog reads `go test -json` and writes what a CI log needs: the
// usual per-package ok/FAIL lines, the output of every failed test, one line
// per test run on a real Envoy release (subtests named envoy-<version>), so
// the log shows they ran and on which releases, and a closing count.
//
//	go test -json ./... | go run ./test/testlog
//
// It exits non-zero when a test or package failed or nothing ran.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

var envoyRun = regexp.MustCompile(`/envoy-(\d+\.\d+\.\d+)(/|$)`)

type summary struct {
	passed, failed, skipped int
	perEnvoy                map[string]int // version → tests passed on it
	failedPkgs              []string
}

func main() {
	s, err := run(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(2)
	}
	if s.failed > 0 || len(s.failedPkgs) > 0 || s.passed == 0 {
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) (summary, error) {
	s := summary{perEnvoy: map[string]int{}}
	outputs := map[string][]string{} // package + test → output lines so far
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintln(out, string(line)) // build errors and vet output are not JSON
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if e.Test != "" {
				outputs[key] = append(outputs[key], e.Output)
			} else if strings.HasPrefix(e.Output, "ok ") || strings.HasPrefix(e.Output, "FAIL") ||
				strings.HasPrefix(e.Output, "?") || strings.Contains(e.Output, "[build failed]") ||
				strings.HasPrefix(e.Output, "panic:") || strings.HasPrefix(e.Output, "# ") {
				fmt.Fprint(out, e.Output)
			}
		case "pass":
			if e.Test == "" {
				continue
			}
			s.passed++
			if m := envoyRun.FindStringSubmatch(e.Test); m != nil {
				s.perEnvoy[m[1]]++
				fmt.Fprintf(out, "--- PASS: %s (%.2fs) [%s]\n", e.Test, e.Elapsed, e.Package)
			}
			delete(outputs, key)
		case "skip":
			if e.Test != "" {
				s.skipped++
				fmt.Fprintf(out, "--- SKIP: %s [%s]\n", e.Test, e.Package)
				for _, l := range outputs[key] {
					fmt.Fprint(out, l)
				}
				delete(outputs, key)
			}
		case "fail":
			if e.Test == "" {
				s.failedPkgs = append(s.failedPkgs, e.Package)
				continue
			}
			s.failed++
			fmt.Fprintf(out, "--- FAIL: %s (%.2fs) [%s]\n", e.Test, e.Elapsed, e.Package)
			for _, l := range outputs[key] {
				fmt.Fprint(out, l)
			}
			delete(outputs, key)
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	versions := make([]string, 0, len(s.perEnvoy))
	for v := range s.perEnvoy {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	for _, v := range versions {
		fmt.Fprintf(out, "real Envoy %s: %d tests passed\n", v, s.perEnvoy[v])
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
	return s, nil
}
