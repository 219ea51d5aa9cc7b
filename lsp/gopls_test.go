package lsp

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
)

// TestGopls runs definition and hover against the real gopls, when it is
// installed, on a module made for the test.
func TestGopls(t *testing.T) { goplsAnswers(t, nil) }

// TestGoplsConfined is TestGopls with gopls confined by bubblewrap to the
// module's folder (workspace-write), as a session's sandbox confines it.
func TestGoplsConfined(t *testing.T) {
	sb := sandboxtest.Bubblewrap(t)
	var dir string
	goplsAnswers(t, func(cmd *exec.Cmd) (func(), error) {
		dir = cmd.Dir
		return sb.Wrap(cmd, sandbox.Policy{Mode: sandbox.WorkspaceWrite, Network: true, Writable: []string{cmd.Dir}, User: sandboxtest.Tenant()}, nil)
	})
	if dir == "" {
		t.Error("gopls was not confined")
	}
}

func goplsAnswers(t *testing.T, confine func(*exec.Cmd) (func(), error)) {
	testwait.Short(t, "the test against gopls, which loads a module first")
	gopls, err := exec.LookPath("gopls")
	if err != nil {
		t.Skip("gopls is not on PATH; the test against a real language server is skipped")
	}
	dir := t.TempDir()
	main := filepath.Join(dir, "main.go")
	files := map[string]string{
		"go.mod": "module example.com/demo\n\ngo 1.21\n",
		"main.go": `package main

import "fmt"

// Greet says hello.
func Greet(name string) string {
	return "hello " + name
}

func main() {
	fmt.Println("é😀", Greet("x"))
}
`,
		"other.go": "package main\n\nvar greeting = Greet(\"y\")\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if confine != nil {
		// Run as the sandbox's user when the tests run as root: it must
		// reach gopls and the module.
		gopls = sandboxtest.Reachable(t, gopls)
		sandboxtest.Own(t, dir)
	}
	c := NewClient(Config{Servers: Servers{"go": gopls}, Timeout: 5 * time.Minute, Confine: confine}, dir, "gopls-test", nil)
	defer c.Close()
	// gopls loads the module before it answers; the bound is for a stuck
	// server, not a measure of speed.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Greet on line 11 comes after "é😀": column 20 in characters, 21 in
	// UTF-16 units.
	res, err := c.Do(ctx, Request{Action: "definition", Path: main, Line: 11, Column: 20})
	if err != nil {
		t.Fatal(err)
	}
	if want := main + ":6:6: func Greet(name string) string {"; res.Text != want {
		t.Errorf("definition: got %q, want %q", res.Text, want)
	}
	res, err = c.Do(ctx, Request{Action: "hover", Path: main, Line: 11, Column: 21})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Text, "func Greet(name string) string") || !strings.Contains(res.Text, "Greet says hello.") {
		t.Errorf("hover: got %q", res.Text)
	}
	other := filepath.Join(dir, "other.go")
	res, err = c.Do(ctx, Request{Action: "references", Path: main, Line: 6, Column: 6})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{main + ":11:20:", other + ":3:16:"} {
		if !strings.Contains(res.Text, want) {
			t.Errorf("references: %q is missing from %q", want, res.Text)
		}
	}
	res, err = c.Do(ctx, Request{Action: "symbols", Path: main, Line: 1, Column: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Text, "Greet") || !strings.Contains(res.Text, "main") {
		t.Errorf("symbols: got %q", res.Text)
	}
	res, err = c.Do(ctx, Request{Action: "rename", Path: main, Line: 6, Column: 6, NewName: "Welcome"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Edits) != 2 || res.Edits[0].Path != main || res.Edits[1].Path != other {
		t.Fatalf("rename: got edits %+v, want main.go and other.go", res.Edits)
	}
	if got := res.Edits[1].NewText; got != "package main\n\nvar greeting = Welcome(\"y\")\n" {
		t.Errorf("rename of other.go: got %q", got)
	}
	if strings.Contains(res.Edits[0].NewText, "Greet(") || !strings.Contains(res.Edits[0].NewText, "Welcome(\"x\")") {
		t.Errorf("rename of main.go: got %q", res.Edits[0].NewText)
	}
}
