package lsp

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGopls runs definition and hover against the real gopls, when it is
// installed, on a module made for the test.
func TestGopls(t *testing.T) {
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
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := NewClient(Servers{"go": gopls}, dir, "gopls-test", nil)
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
}
