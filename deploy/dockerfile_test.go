package deploy

import (
	"os"
	"strings"
	"testing"
)

// TestDockerfile checks the image recipe: multi-stage, a static (CGO-free)
// build of ./cmd/swarmgate, a distroless or scratch final stage, a numeric
// non-root user, and the entrypoint the compose file and manifests rely on.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	var user, entrypoint string
	var build string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(line, "#") {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			froms = append(froms, line)
			user = "" // USER is per stage
		case "USER":
			user = fields[1]
		case "ENTRYPOINT":
			entrypoint = strings.TrimSpace(strings.TrimPrefix(line, fields[0]))
		}
	}
	build = string(data)
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, FROM lines: %v", froms)
	}
	final := froms[len(froms)-1]
	if !strings.Contains(final, "distroless/static") && !strings.Contains(final, "scratch") {
		t.Errorf("final stage %q is not distroless/static or scratch", final)
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" || strings.Trim(uid, "0123456789") != "" {
		t.Errorf("final stage USER %q: want a numeric non-root uid (runAsNonRoot can only verify numbers)", user)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/swarmgate", "-trimpath"} {
		if !strings.Contains(build, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if entrypoint != `["/usr/local/bin/swarmgate"]` {
		t.Errorf("ENTRYPOINT %s: the compose file and manifests pass only the subcommand and flags", entrypoint)
	}
}
