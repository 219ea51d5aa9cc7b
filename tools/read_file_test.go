package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mm-agent/mm/lsp"
)

func runTool(t *testing.T, env Env, tool, args string) Result {
	t.Helper()
	c, err := Prepare(env, tool, args)
	if err != nil {
		t.Fatalf("Prepare(%s, %s): %v", tool, args, err)
	}
	return Run(context.Background(), env, c)
}

// numbered returns n lines "line 1\n" … "line n\n".
func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// shown is text (whole lines) as read_file shows it from line first: each
// line numbered.
func shown(first int, text string) string {
	var b strings.Builder
	for i, l := range strings.SplitAfter(text, "\n") {
		if l == "" {
			continue
		}
		fmt.Fprintf(&b, "%6d\t%s", first+i, strings.TrimSuffix(l, "\n")+"\n")
	}
	return b.String()
}

func TestReadFile(t *testing.T) {
	cwd := t.TempDir()
	mustWrite(t, filepath.Join(cwd, "ten.txt"), numbered(10))
	mustWrite(t, filepath.Join(cwd, "open.txt"), "a\nb\nlast without newline")
	mustWrite(t, filepath.Join(cwd, "empty.txt"), "")
	mustWrite(t, filepath.Join(cwd, "sub", "deep.txt"), "deep\n")
	mustWrite(t, filepath.Join(cwd, "utf8.txt"), "héllo wörld ✓\n")
	mustWrite(t, filepath.Join(cwd, "crlf.txt"), "one\r\ntwo\r\n")
	env := Env{Cwd: cwd}
	abs := func(p string) string { return filepath.Join(cwd, p) }
	tests := []struct {
		name, args, want string
		failed           bool
	}{
		{"whole file", `{"path":"ten.txt"}`, shown(1, numbered(10)), false},
		{"absolute path", fmt.Sprintf(`{"path":%q}`, abs("ten.txt")), shown(1, numbered(10)), false},
		{"relative path with dots", `{"path":"sub/../sub/deep.txt"}`, "     1\tdeep\n", false},
		{"utf-8 kept", `{"path":"utf8.txt"}`, "     1\théllo wörld ✓\n", false},
		{"no final newline", `{"path":"open.txt"}`, "     1\ta\n     2\tb\n     3\tlast without newline\n", false},
		{"offset", `{"path":"ten.txt","offset":8}`, "     8\tline 8\n     9\tline 9\n    10\tline 10\n[lines 8-10 of 10]", false},
		{"limit", `{"path":"ten.txt","limit":2}`, "     1\tline 1\n     2\tline 2\n[lines 1-2 of 10; 57 more bytes; use offset=3 to read more]", false},
		{"offset and limit", `{"path":"ten.txt","offset":4,"limit":3}`, shown(4, "line 4\nline 5\nline 6\n") + "[lines 4-6 of 10; 29 more bytes; use offset=7 to read more]", false},
		{"limit past the end", `{"path":"ten.txt","offset":9,"limit":50}`, shown(9, "line 9\nline 10\n") + "[lines 9-10 of 10]", false},
		{"last open line by offset", `{"path":"open.txt","offset":3}`, "     3\tlast without newline\n[lines 3-3 of 3]", false},
		{"open line after the window", `{"path":"open.txt","limit":1}`, "     1\ta\n[lines 1-1 of 3; 22 more bytes; use offset=2 to read more]", false},
		{"crlf", `{"path":"crlf.txt"}`, "     1\tone\n     2\ttwo\n", false},
		{"empty file", `{"path":"empty.txt"}`, "[" + abs("empty.txt") + " is empty]", false},
		{"offset past the end", `{"path":"ten.txt","offset":11}`, "[offset 11 is past the end of " + abs("ten.txt") + ", which has 10 lines]", true},
		{"missing file", `{"path":"nope.txt"}`, "[" + abs("nope.txt") + " does not exist]", true},
		{"directory", `{"path":"."}`, "[" + cwd + " is a directory, not a file; read_file reads files. It has 6 entries:]\ncrlf.txt\nempty.txt\nopen.txt\nsub/\nten.txt\nutf8.txt", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runTool(t, env, "read_file", tt.args)
			if r.Output != tt.want || r.Failed != tt.failed {
				t.Errorf("got failed=%v %q\nwant failed=%v %q", r.Failed, r.Output, tt.failed, tt.want)
			}
		})
	}
}

func TestReadFileSpecialFiles(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd}
	mustWrite(t, filepath.Join(cwd, "bin"), "ELF\x00\x01\x02")
	r := runTool(t, env, "read_file", `{"path":"bin"}`)
	if !r.Failed || !strings.Contains(r.Output, "is a binary file") {
		t.Errorf("binary: %+v", r)
	}
	r = runTool(t, env, "read_file", `{"path":"/dev/null"}`)
	if !r.Failed || !strings.Contains(r.Output, "not a regular file") {
		t.Errorf("device: %+v", r)
	}
	mustMkdir(t, filepath.Join(cwd, "empty"))
	r = runTool(t, env, "read_file", `{"path":"empty"}`)
	if !r.Failed || !strings.HasSuffix(r.Output, "It has 0 entries]") {
		t.Errorf("empty dir: %+v", r)
	}
	if os.Geteuid() != 0 { // root reads anything
		mustWrite(t, filepath.Join(cwd, "locked"), "x")
		os.Chmod(filepath.Join(cwd, "locked"), 0)
		r = runTool(t, env, "read_file", `{"path":"locked"}`)
		if !r.Failed || !strings.Contains(r.Output, "permission denied") {
			t.Errorf("unreadable: %+v", r)
		}
	}
}

func TestReadFileBigDirectoryListingIsCut(t *testing.T) {
	cwd := t.TempDir()
	for i := range maxDirEntries + 5 {
		mustWrite(t, filepath.Join(cwd, fmt.Sprintf("f%03d", i)), "")
	}
	r := runTool(t, Env{Cwd: cwd}, "read_file", `{"path":"."}`)
	if !r.Failed || !strings.HasSuffix(r.Output, "f199\n[… 5 more entries]") {
		t.Errorf("got %.100q…%q", r.Output, r.Output[len(r.Output)-40:])
	}
}

// TestReadFileBounded: with no limit, read_file shows the first
// DefaultReadLines lines, or what fits the budget (whole numbered lines),
// and says where to go on; a line over MaxLineBytes is cut, saying by how
// much, characters whole.
func TestReadFileBounded(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd, Output: Output{Budget: MaxOutputBytes}}
	mustWrite(t, filepath.Join(cwd, "many.txt"), numbered(10000))
	r := runTool(t, env, "read_file", `{"path":"many.txt"}`)
	rest := len(numbered(10000)) - len(numbered(2000))
	if want := shown(1, numbered(2000)) + fmt.Sprintf("[lines 1-2000 of 10000; %d more bytes; use offset=2001 to read more]", rest); r.Failed || r.Output != want {
		t.Errorf("the default window: got %d bytes ending %q", len(r.Output), r.Output[len(r.Output)-100:])
	}

	// 100-byte lines with their numbers: what fits in 8 KiB.
	env.Output.Budget = 8192
	line := strings.Repeat("x", 99) + "\n"
	mustWrite(t, filepath.Join(cwd, "big.txt"), strings.Repeat(line, 5000))
	r = runTool(t, env, "read_file", `{"path":"big.txt"}`)
	fit := 8192 / (len(line) + 7)
	marker := fmt.Sprintf("[lines 1-%d of 5000; output limit of 8,192 bytes reached, %d more bytes; use offset=%d to read more]", fit, (5000-fit)*len(line), fit+1)
	if r.Failed || r.Output != shown(1, strings.Repeat(line, fit))+marker {
		t.Errorf("the budget: got %d bytes ending %q", len(r.Output), r.Output[len(r.Output)-200:])
	}
	// The offset the marker gives reads on from there.
	r = runTool(t, env, "read_file", fmt.Sprintf(`{"path":"big.txt","offset":%d}`, fit+1))
	if !strings.HasPrefix(r.Output, fmt.Sprintf("%6d\t", fit+1)) || !strings.Contains(r.Output, fmt.Sprintf("[lines %d-%d of 5000;", fit+1, 2*fit)) {
		t.Errorf("second page: %.20q … %q", r.Output, r.Output[len(r.Output)-120:])
	}

	// Lines longer than the read buffer and than MaxLineBytes are cut.
	l2 := strings.Repeat("é", 100000) // 200,000 bytes
	mustWrite(t, filepath.Join(cwd, "wide.txt"), "a\n"+l2+"\nz\n")
	r = runTool(t, env, "read_file", `{"path":"wide.txt"}`)
	want := "     1\ta\n     2\t" + strings.Repeat("é", MaxLineBytes/2) + fmt.Sprintf(" [… %s more in this line]\n", count(int64(len(l2)-MaxLineBytes), "byte")) + "     3\tz\n"
	if r.Failed || r.Output != want {
		t.Errorf("wide lines: got %d bytes: %.60q … %q", len(r.Output), r.Output, r.Output[len(r.Output)-80:])
	}
	// And with a tiny budget, a long line still shows, cut shorter.
	env.Output.Budget = 1024
	r = runTool(t, env, "read_file", `{"path":"wide.txt","offset":2,"limit":1}`)
	if r.Failed || !strings.HasPrefix(r.Output, "     2\téé") || len(r.Output) > 1024+200 || strings.ContainsRune(r.Output, '\uFFFD') {
		t.Errorf("a long line with a small budget: %d bytes: %q", len(r.Output), r.Output)
	}
}

func TestReadFileHomeAndWindowsPaths(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	mustWrite(t, filepath.Join(home, "notes.md"), "note\n")
	r := runTool(t, Env{Cwd: "/"}, "read_file", `{"path":"~/notes.md"}`)
	if r.Failed || r.Output != "     1\tnote\n" {
		t.Errorf("~ path: %+v", r)
	}
	c, err := Prepare(Env{Cwd: "/"}, "read_file", `{"path":"E:\\Projects\\x.txt"}`)
	if err != nil || c.Locations[0] != "/mnt/e/Projects/x.txt" || c.Title != `read_file: E:\Projects\x.txt` {
		t.Errorf("windows path: %+v %v", c, err)
	}
}

func TestReadFileManyLines(t *testing.T) {
	// Counting the lines past the window must be right at block edges.
	cwd := t.TempDir()
	var b strings.Builder
	for i := range 200000 {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	b.WriteString("tail")
	mustWrite(t, filepath.Join(cwd, "many.txt"), b.String())
	r := runTool(t, Env{Cwd: cwd}, "read_file", `{"path":"many.txt","limit":1}`)
	want := fmt.Sprintf("     1\t0\n[lines 1-1 of 200001; %d more bytes; use offset=2 to read more]", b.Len()-2)
	if r.Output != want {
		t.Errorf("got %q, want %q", r.Output, want)
	}
}

// recordLSP is a language server that records what it is asked.
type recordLSP struct{ got []lsp.Request }

func (r *recordLSP) Do(_ context.Context, req lsp.Request) (lsp.Result, error) {
	r.got = append(r.got, req)
	return lsp.Result{Text: "ok"}, nil
}

// TestLSPTakesReadFileNumbers: a position read off read_file's output (the
// number before the tab, the column in the text after it) is the one the
// language server is asked about: the file's line and character.
func TestLSPTakesReadFileNumbers(t *testing.T) {
	cwd := t.TempDir()
	src := "package main\n\nfunc Foo() int { return 1 }\n\nfunc main() { _ = Foo() }\n"
	mustWrite(t, filepath.Join(cwd, "main.go"), src)
	server := &recordLSP{}
	env := Env{Cwd: cwd, LSP: server}
	out := runTool(t, env, "read_file", `{"path":"main.go"}`).Output
	var line, col int
	for _, l := range strings.Split(out, "\n") {
		num, text, ok := strings.Cut(l, "\t")
		if i := strings.Index(text, "_ = Foo"); ok && i >= 0 {
			line, _ = strconv.Atoi(strings.TrimSpace(num))
			col = len([]rune(text[:i+len("_ = ")])) + 1
		}
	}
	r := runTool(t, env, "lsp", fmt.Sprintf(`{"action":"definition","path":"main.go","line":%d,"column":%d}`, line, col))
	if r.Failed || len(server.got) != 1 {
		t.Fatalf("lsp: %+v", r)
	}
	got := server.got[0]
	fileLine := strings.Split(src, "\n")[got.Line-1]
	if at := string([]rune(fileLine)[got.Column-1:]); !strings.HasPrefix(at, "Foo()") {
		t.Errorf("the server was asked about line %d column %d: %q", got.Line, got.Column, at)
	}
}
