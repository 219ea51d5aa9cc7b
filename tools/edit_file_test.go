package tools

import (
	"context"
	"encoding/json"
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
	if !r.Failed || r.Output != fmt.Sprintf("[old_text not found in %s; read the file again and copy the text exactly, whitespace and indentation included; nothing in the file looks like it]", p) {
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

// TestEditFileLadder: old_text that is not in the file as given still
// lands when exactly one place matches it with what models get wrong
// forgiven — tabs for spaces, trailing blanks, curly quotes, dashes, odd
// spaces, a BOM, read_file's line numbers — and the result says what was
// forgiven and shows the lines; more than one place, or none, is an error
// that names the places or quotes the lines most like it.
func TestEditFileLadder(t *testing.T) {
	tabs := "package main\n\nfunc main() {\n\tif ok {\n\t\trun()\n\t}\n}\n"
	tests := []struct {
		name, file string
		old, new   string
		want       string // the file after; "" for an error
		how        string // in the output (the error's, when want is "")
	}{
		{"tabs vs spaces", tabs,
			"    if ok {\n        run()\n    }", "    if ok {\n        run()\n        log()\n    }",
			"package main\n\nfunc main() {\n\tif ok {\n\t\trun()\n\t\tlog()\n\t}\n}\n", "ignoring indentation (new_text re-indented to match)"},
		{"another base and unit", tabs,
			"if ok {\n  run()", "if ok {\n  run(1)\n  log()",
			"package main\n\nfunc main() {\n\tif ok {\n\t\trun(1)\n\t\tlog()\n\t}\n}\n", "ignoring indentation"},
		{"trailing blanks in the file", "a := 1   \nb := 2\t\nc := 3\n",
			"a := 1\nb := 2\n", "a := 10\nb := 20\n",
			"a := 10\nb := 20\nc := 3\n", "ignoring trailing whitespace"},
		{"trailing blanks in old_text", "x\ny\nz\n",
			"x  \ny \n", "X\nY\n",
			"X\nY\nz\n", "ignoring trailing whitespace"},
		{"curly quotes", "msg := “hello” // it’s\n",
			`msg := "hello" // it's`, `msg := "bye"`,
			"msg := \"bye\"\n", "Unicode quotes, dashes and spaces"},
		{"em dash", "// a — b\nx\n",
			"// a - b", "// a, b",
			"// a, b\nx\n", "Unicode quotes, dashes and spaces"},
		{"nbsp", "total:\u00a042\n",
			"total: 42", "total: 43",
			"total: 43\n", "Unicode quotes, dashes and spaces"},
		{"BOM and curly quotes", "\ufeffname = “mm”\nx = 1\n",
			"\ufeffname = \"mm\"", "name = \"mm\"",
			"\ufeffname = \"mm\"\nx = 1\n", "Unicode quotes, dashes and spaces"}, // the file keeps its BOM
		{"numbered text from read_file", tabs,
			"     4\t\tif ok {\n     5\t\t\trun()\n", "     4\t\tif ok {\n     5\t\t\trun(2)\n",
			"package main\n\nfunc main() {\n\tif ok {\n\t\trun(2)\n\t}\n}\n", "removing the line numbers copied from read_file"},
		{"numbered old_text, plain new_text", tabs,
			"5\t\t\trun()", "\t\trun(3)",
			"package main\n\nfunc main() {\n\tif ok {\n\t\trun(3)\n\t}\n}\n", "removing the line numbers"},
		{"numbered and indented otherwise", tabs,
			"     5\t    run()\n     6\t}", "     5\t    run(4)\n     6\t}",
			"package main\n\nfunc main() {\n\tif ok {\n\t\trun(4)\n\t}\n}\n", "removing the line numbers copied from read_file and ignoring indentation"},
		{"CRLF and trailing blanks", "one  \r\ntwo\r\nthree\r\n",
			"one\ntwo\n", "1\n2\n",
			"1\r\n2\r\nthree\r\n", "ignoring trailing whitespace"},
		{"ambiguous after tolerance", "\tf()\nx\n\tf()\n",
			"    f()", "g()",
			"", "after ignoring indentation (new_text re-indented to match) it matches 2 places (lines 1, 3)"},
		{"ambiguous quotes", "a(“x”)\na(\"x\")\n",
			"a(„x“)", "b",
			"", "after ignoring trailing whitespace and Unicode quotes, dashes and spaces it matches 2 places (lines 1, 2)"},
		{"nothing close", tabs,
			"if ok {\n\t\trunAll()\n\t}", "x",
			"", "the lines most like it are 4-6:\n     3\tfunc main() {\n     4\t\tif ok {\n     5\t\t\trun()\n     6\t\t}\n     7\t}"},
		{"nothing at all", tabs,
			"zebra crossing", "x",
			"", "nothing in the file looks like it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cwd := t.TempDir()
			p := filepath.Join(cwd, "f.go")
			mustWrite(t, p, tt.file)
			args, _ := json.Marshal(map[string]string{"path": "f.go", "old_text": tt.old, "new_text": tt.new})
			c, err := Prepare(Env{Cwd: cwd}, "edit_file", string(args))
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), tt.how) {
					t.Errorf("error %v, want it to say %q", err, tt.how)
				}
				assertFile(t, p, tt.file)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// What the user approves is the change made.
			if c.Proposal == nil || c.Proposal.NewText != tt.want {
				t.Errorf("the proposal:\n%q\nwant\n%q", c.Proposal.NewText, tt.want)
			}
			r := Run(context.Background(), Env{Cwd: cwd}, c)
			if r.Failed || !strings.Contains(r.Output, "old_text matched only after") || !strings.Contains(r.Output, tt.how) || !strings.Contains(r.Output, "now read:\n") {
				t.Errorf("output %q, want it to say %q", r.Output, tt.how)
			}
			assertFile(t, p, tt.want)
		})
	}
}
