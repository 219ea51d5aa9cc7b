package tools

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
)

var update = flag.Bool("update", false, "rewrite testdata/definitions.golden")

// renderDefinitions is what the model reads of the built-in tools, as a
// reviewer reads it: each tool's name, description and schema (indented).
func renderDefinitions(ts []Tool) string {
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "=== %s\n\n%s\n", t.Name(), strings.TrimRight(t.Description(), "\n"))
		var schema bytes.Buffer
		if err := json.Indent(&schema, t.Schema(), "", "  "); err != nil {
			schema.Reset()
			schema.Write(t.Schema())
		}
		fmt.Fprintf(&b, "\n--- schema\n%s\n", schema.String())
	}
	return b.String()
}

// definitionsSize is the size of the definitions as every request carries
// them: the bytes of names, descriptions and schemas (compact, as they go
// on the wire), and mm's estimate of their tokens.
func definitionsSize(ts []Tool) (n, tokens int) {
	var all strings.Builder
	for _, t := range ts {
		all.WriteString(t.Name())
		all.WriteString(t.Description())
		var schema bytes.Buffer
		if err := json.Compact(&schema, t.Schema()); err != nil {
			schema.Write(t.Schema())
		}
		all.Write(schema.Bytes())
	}
	return all.Len(), llm.EstimateTokens([]history.Message{{Role: history.RoleTool, Content: all.String()}})
}

// TestDefinitionsGolden compares the tool definitions the model reads with
// testdata/definitions.golden, so that a change of a description or a
// schema shows in review. After an intended change, run
// go test ./tools -run TestDefinitionsGolden -update and read the diff.
func TestDefinitionsGolden(t *testing.T) {
	got := renderDefinitions(Builtin())
	path := filepath.Join("testdata", "definitions.golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("line %d differs (run with -update after an intended change):\n got  %s\n want %s", i+1, g, w)
			}
		}
	}
	n, tokens := definitionsSize(Builtin())
	t.Logf("all built-in tool definitions: %d bytes, about %d tokens", n, tokens)
	n, tokens = definitionsSize(Offered(Has{}))
	t.Logf("offered with no agent, language server or skill: %d bytes, about %d tokens", n, tokens)
}
