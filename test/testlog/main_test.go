package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA/envoy-1.38.3","Output":"noise\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA/envoy-1.38.3","Elapsed":0.5}`,
		`{"Action":"pass","Package":"p","Test":"TestA/envoy-1.40.0/case","Elapsed":0.25}`,
		`{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: boom\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB","Elapsed":0.1}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: no Redis\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t1.2s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":1.2}`,
		`# q`,
		`q/x.go:1:1: syntax error`,
	}, "\n")
	var out strings.Builder
	s, err := run(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	if s.passed != 3 || s.failed != 1 || s.skipped != 1 || len(s.failedPkgs) != 1 {
		t.Errorf("summary %+v", s)
	}
	for _, want := range []string{
		"--- PASS: TestA/envoy-1.38.3 (0.50s) [p]",
		"--- PASS: TestA/envoy-1.40.0/case (0.25s) [p]",
		"--- FAIL: TestB (0.10s) [p]\n    b_test.go:9: boom\n",
		"--- SKIP: TestC [p]\n    c_test.go:3: no Redis\n",
		"FAIL\tp\t1.2s\n",
		"q/x.go:1:1: syntax error\n",
		"real Envoy 1.38.3: 1 tests passed\nreal Envoy 1.40.0: 1 tests passed\n",
		"3 passed, 1 failed, 1 skipped\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "noise") || strings.Contains(out.String(), "--- PASS: TestA (") {
		t.Errorf("passing tests' output or non-Envoy passes printed:\n%s", out.String())
	}
}
