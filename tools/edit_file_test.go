package tools

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func runCall(t *testing.T, env Env, c *Call) Result {
	t.Helper()
	return Run(context.Background(), env, c)
}

const goSource = `package main

func main() {
	println("hello")
	println("hello")
}
`

func TestEditFile(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd}
	p := filepath.Join(cwd, "main.go")
	mustWrite(t, p, goSource)
	c, err := Prepare(env, "edit_file", `{"path":"main.go","old_text":"func main() {","new_text":"func main() { // entry"}`)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(goSource, "func main() {", "func main() { // entry", 1)
	if c.Proposal == nil || c.Proposal.Path != p || *c.Proposal.OldText != goSource || c.Proposal.NewText != want {
		t.Errorf("proposal %+v", c.Proposal)
	}
	// Prepare changes nothing.
	assertFile(t, p, goSource)
	r := runCall(t, env, c)
	if r.Failed || r.Output != "Edited "+p+": replaced 1 occurrence of old_text." {
		t.Errorf("got %+v", r)
	}
	if r.Diff == nil || *r.Diff.OldText != goSource || r.Diff.NewText != want {
		t.Errorf("diff %+v", r.Diff)
	}
	assertFile(t, p, want)
}

func TestEditFileReplaceAllAndDelete(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd}
	p := filepath.Join(cwd, "main.go")
	mustWrite(t, p, goSource)
	r := runTool(t, env, "edit_file", `{"path":"main.go","old_text":"hello","new_text":"bye","replace_all":true}`)
	if r.Failed || r.Output != "Edited "+p+": replaced 2 occurrences of old_text." {
		t.Errorf("got %+v", r)
	}
	assertFile(t, p, strings.ReplaceAll(goSource, "hello", "bye"))
	r = runTool(t, env, "edit_file", `{"path":"main.go","old_text":"\n\tprintln(\"bye\")\n\tprintln(\"bye\")","new_text":""}`)
	if r.Failed {
		t.Errorf("got %+v", r)
	}
	assertFile(t, p, "package main\n\nfunc main() {\n}\n")
}

func TestEditFileErrors(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd}
	p := filepath.Join(cwd, "main.go")
	mustWrite(t, p, goSource)
	mustMkdir(t, filepath.Join(cwd, "pkg"))
	tests := []struct{ name, args, want string }{
		{"not found", `{"path":"main.go","old_text":"goodbye","new_text":"x"}`,
			"old_text not found in " + p + "; read the file again and copy the text exactly, whitespace and indentation included"},
		{"whitespace matters", `{"path":"main.go","old_text":"println(\"hello\")\nprintln","new_text":"x"}`,
			"old_text not found in " + p},
		{"not unique", `{"path":"main.go","old_text":"println(\"hello\")","new_text":"x"}`,
			"old_text occurs 2 times in " + p + "; add surrounding lines to old_text so that it matches exactly one place, or set replace_all to true to replace every occurrence"},
		{"not unique, replace_all false", `{"path":"main.go","old_text":"hello","new_text":"x","replace_all":false}`,
			"old_text occurs 2 times in " + p},
		{"empty old_text", `{"path":"main.go","old_text":"","new_text":"x"}`, "old_text is empty"},
		{"no change", `{"path":"main.go","old_text":"main","new_text":"main"}`, "old_text and new_text are the same"},
		{"missing file", `{"path":"gone.go","old_text":"a","new_text":"b"}`, filepath.Join(cwd, "gone.go") + " does not exist; use write_file to create it"},
		{"directory", `{"path":"pkg","old_text":"a","new_text":"b"}`, filepath.Join(cwd, "pkg") + " is a directory, not a file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Prepare(env, "edit_file", tt.args)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Prepare error %v, want %q", err, tt.want)
			}
			if c == nil || c.Title == "" || c.Kind != KindEdit {
				t.Errorf("no Call to show: %+v", c)
			}
			// Run on the same call (built by hand, as a replay would) fails
			// the same way and changes nothing.
			r := Run(context.Background(), env, &Call{Tool: editFileTool{}, Args: c.Args})
			if !r.Failed || !strings.HasPrefix(r.Output, "["+tt.want) {
				t.Errorf("Run: %+v", r)
			}
			assertFile(t, p, goSource)
		})
	}
}

// TestEditFileChangedAfterPrepare covers a file that changes while the
// user looks at the permission request.
func TestEditFileChangedAfterPrepare(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd}
	p := filepath.Join(cwd, "f.txt")
	mustWrite(t, p, "alpha\nbeta\n")
	c, err := Prepare(env, "edit_file", `{"path":"f.txt","old_text":"beta","new_text":"BETA"}`)
	if err != nil {
		t.Fatal(err)
	}
	// Changed elsewhere, but old_text still there: the edit applies to the
	// current content, and the diff says so.
	mustWrite(t, p, "zero\nalpha\nbeta\n")
	r := runCall(t, env, c)
	if r.Failed || *r.Diff.OldText != "zero\nalpha\nbeta\n" || r.Diff.NewText != "zero\nalpha\nBETA\n" {
		t.Errorf("got %+v", r)
	}
	// Changed so that old_text is gone: a clear failure, nothing written.
	c, err = Prepare(env, "edit_file", `{"path":"f.txt","old_text":"alpha","new_text":"ALPHA"}`)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, p, "rewritten\n")
	r = runCall(t, env, c)
	if !r.Failed || r.Output != fmt.Sprintf("[old_text not found in %s; read the file again and copy the text exactly, whitespace and indentation included]", p) {
		t.Errorf("got %+v", r)
	}
	assertFile(t, p, "rewritten\n")
}

func TestEditFileCRLF(t *testing.T) {
	cwd := t.TempDir()
	p := filepath.Join(cwd, "win.txt")
	mustWrite(t, p, "one\r\ntwo\r\nthree\r\n")
	r := runTool(t, Env{Cwd: cwd}, "edit_file", `{"path":"win.txt","old_text":"one\ntwo\n","new_text":"1\n2\n"}`)
	if r.Failed {
		t.Fatalf("got %+v", r)
	}
	assertFile(t, p, "1\r\n2\r\nthree\r\n")
}
