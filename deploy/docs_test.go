package deploy

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMigrationExamples loads every swarmgate config example of
// docs/migration.md (YAML blocks that start with "# swarmgate").
func TestMigrationExamples(t *testing.T) {
	data, err := os.ReadFile("../docs/migration.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)\\s*```").FindAllStringSubmatch(string(data), -1)
	n := 0
	for _, b := range blocks {
		// Indented blocks (inside list items) are dedented first.
		body := b[1]
		if indent := len(body) - len(strings.TrimLeft(body, " ")); indent > 0 {
			body = regexp.MustCompile("(?m)^ {"+strconv.Itoa(indent)+"}").ReplaceAllString(body, "")
		}
		if !strings.HasPrefix(body, "# swarmgate\n") {
			continue
		}
		n++
		parseConfig(t, []byte(body), "docs/migration.md example")
	}
	if n < 2 { // the single-key and the LiteLLM examples
		t.Fatalf("docs/migration.md: %d swarmgate config examples found, want 2", n)
	}
}
