package prompt

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
)

var update = flag.Bool("update", false, "write the golden files of testdata/")

// golden is the default system message as a session assembles it, with
// the environment fixed: mm's prompt, a project's AGENTS.md, the
// environment of mm -acp's defaults (no sandbox, yolo).
func golden(t *testing.T, compact bool) string {
	t.Helper()
	sample, err := os.ReadFile("testdata/AGENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	return System(Parts{
		Compact:      compact,
		Instructions: []File{{Path: "/home/user/project/AGENTS.md", Dir: "/home/user/project", Text: string(sample)}},
		Env: Env{
			Date: time.Date(2026, 5, 14, 9, 30, 0, 0, time.UTC), OS: "linux", Arch: "amd64", Cwd: "/home/user/project",
			Git: &Git{Root: "/home/user/project", Branch: "main", Status: []string{" M server/handler.go", "?? notes.txt"},
				Commits: []string{"4f2a9c1 server: time out idle clients", "9b1d0e7 docs: how to run the tests", "c3e8f20 first import"}},
			RG: true,
		},
		Policy: Policy{},
	})
}

// TestSystemGolden keeps the default system message, for a small and a
// large window, in testdata/ so that every change to what the model reads
// shows in review. -update writes them again.
func TestSystemGolden(t *testing.T) {
	for _, tc := range []struct {
		name    string
		compact bool
	}{{"system-small-window.md", true}, {"system-large-window.md", false}} {
		got := golden(t, tc.compact)
		tokens := llm.EstimateTokens([]history.Message{{Role: history.RoleSystem, Content: got}})
		t.Logf("%s: %d bytes, about %d tokens (llm.EstimateTokens)", tc.name, len(got), tokens)
		path := filepath.Join("testdata", tc.name)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./prompt -run Golden -update writes it)", err)
		}
		if got != string(want) {
			t.Errorf("%s differs from what System makes now; if the change is meant, run go test ./prompt -run Golden -update and review the diff", path)
		}
	}
}

// TestSystemParts: the user's own file extends or replaces mm's prompt,
// with {{cwd}} filled in; the environment always closes the message;
// skills are listed; Compact follows the window.
func TestSystemParts(t *testing.T) {
	env := Env{Date: time.Now(), OS: "linux", Arch: "amd64", Cwd: "/w"}
	ext := System(Parts{Own: "Always answer in French. Work in {{cwd}}.", Env: env, Skills: []Skill{{"deploy", "ship it"}}})
	if !strings.HasPrefix(ext, "You are Bob") || !strings.Contains(ext, "# The user's own instructions\nAlways answer in French. Work in /w.\n") ||
		!strings.Contains(ext, "- deploy: ship it\n") {
		t.Errorf("extended:\n%s", ext)
	}
	rep := System(Parts{Own: "You are Ada.", Replace: true, Env: env})
	if !strings.HasPrefix(rep, "You are Ada.\n") || strings.Contains(rep, "You are Bob") || !strings.Contains(rep, "# Environment\n") {
		t.Errorf("replaced:\n%s", rep)
	}
	for _, tc := range []struct {
		window, below int
		want          bool
	}{{0, 16384, false}, {8192, 16384, true}, {16384, 16384, false}, {128000, 16384, false}, {8192, 0, false}} {
		if got := Compact(tc.window, tc.below); got != tc.want {
			t.Errorf("Compact(%d, %d) = %v", tc.window, tc.below, got)
		}
	}
	if InstructionBytes(32<<10, 8192) != 4096 || InstructionBytes(32<<10, 0) != 32<<10 || InstructionBytes(32<<10, 200000) != 32<<10 {
		t.Error("InstructionBytes")
	}
}

func TestReadOwn(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.md")
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 70<<10)), 0o644); err != nil {
		t.Fatal(err)
	}
	text, err := ReadOwn(path)
	if err != nil || len(text) > 65<<10 || !strings.Contains(text, "more bytes of "+path+" left out") {
		t.Errorf("ReadOwn: %d bytes, %v", len(text), err)
	}
	if _, err := ReadOwn(filepath.Join(dir, "none.md")); err == nil {
		t.Error("a missing file must be an error")
	}
}
