package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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

func TestReadFile(t *testing.T) {
	cwd := t.TempDir()
	mustWrite(t, filepath.Join(cwd, "ten.txt"), numbered(10))
	mustWrite(t, filepath.Join(cwd, "open.txt"), "a\nb\nlast without newline")
	mustWrite(t, filepath.Join(cwd, "empty.txt"), "")
	mustWrite(t, filepath.Join(cwd, "sub", "deep.txt"), "deep\n")
	mustWrite(t, filepath.Join(cwd, "utf8.txt"), "héllo wörld ✓\n")
	env := Env{Cwd: cwd}
	abs := func(p string) string { return filepath.Join(cwd, p) }
	tests := []struct {
		name, args, want string
		failed           bool
	}{
		{"whole file", `{"path":"ten.txt"}`, numbered(10), false},
		{"absolute path", fmt.Sprintf(`{"path":%q}`, abs("ten.txt")), numbered(10), false},
		{"relative path with dots", `{"path":"sub/../sub/deep.txt"}`, "deep\n", false},
		{"utf-8 kept", `{"path":"utf8.txt"}`, "héllo wörld ✓\n", false},
		{"no final newline", `{"path":"open.txt"}`, "a\nb\nlast without newline", false},
		{"offset", `{"path":"ten.txt","offset":8}`, "line 8\nline 9\nline 10\n[lines 8-10 of 10]", false},
		{"limit", `{"path":"ten.txt","limit":2}`, "line 1\nline 2\n[lines 1-2 of 10; 57 more bytes; use offset=3 to read more]", false},
		{"offset and limit", `{"path":"ten.txt","offset":4,"limit":3}`, "line 4\nline 5\nline 6\n[lines 4-6 of 10; 29 more bytes; use offset=7 to read more]", false},
		{"limit past the end", `{"path":"ten.txt","offset":9,"limit":50}`, "line 9\nline 10\n[lines 9-10 of 10]", false},
		{"last open line by offset", `{"path":"open.txt","offset":3}`, "last without newline\n[lines 3-3 of 3]", false},
		{"open line after the window", `{"path":"open.txt","limit":1}`, "a\n[lines 1-1 of 3; 22 more bytes; use offset=2 to read more]", false},
		{"empty file", `{"path":"empty.txt"}`, "[" + abs("empty.txt") + " is empty]", false},
		{"offset past the end", `{"path":"ten.txt","offset":11}`, "[offset 11 is past the end of " + abs("ten.txt") + ", which has 10 lines]", true},
		{"missing file", `{"path":"nope.txt"}`, "[" + abs("nope.txt") + " does not exist]", true},
		{"directory", `{"path":"."}`, "[" + cwd + " is a directory, not a file; read_file reads files. It has 5 entries:]\nempty.txt\nopen.txt\nsub/\nten.txt\nutf8.txt", true},
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

func TestReadFileTruncation(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd, Output: Output{Budget: MaxOutputBytes}}
	// 100-byte lines: 2621 lines fit in 256 KiB, the file has 5000.
	line := strings.Repeat("x", 99) + "\n"
	mustWrite(t, filepath.Join(cwd, "big.txt"), strings.Repeat(line, 5000))
	r := runTool(t, env, "read_file", `{"path":"big.txt"}`)
	fit := MaxOutputBytes / len(line)
	marker := fmt.Sprintf("[lines 1-%d of 5000; output limit of 262,144 bytes reached, %d more bytes; use offset=%d to read more]", fit, (5000-fit)*len(line), fit+1)
	if r.Failed || !strings.HasSuffix(r.Output, "\n"+marker) {
		t.Errorf("marker missing; output ends %q", r.Output[len(r.Output)-200:])
	}
	if body := strings.TrimSuffix(r.Output, marker); body != strings.Repeat(line, fit) {
		t.Errorf("body is %d bytes, want %d whole lines", len(body), fit)
	}
	// The offset the marker gives reads on from there.
	r = runTool(t, env, "read_file", fmt.Sprintf(`{"path":"big.txt","offset":%d}`, fit+1))
	if !strings.HasSuffix(r.Output, fmt.Sprintf("\n[lines %d-5000 of 5000]", fit+1)) {
		t.Errorf("second page ends %q", r.Output[len(r.Output)-200:])
	}

	// Lines longer than the read buffer are kept whole, and the line that
	// would cross the limit is left out entirely.
	l2, l3 := strings.Repeat("b", 200000)+"\n", strings.Repeat("c", 100000)+"\n"
	mustWrite(t, filepath.Join(cwd, "wide.txt"), "a\n"+l2+l3+"z\n")
	r = runTool(t, env, "read_file", `{"path":"wide.txt"}`)
	if want := "a\n" + l2 + fmt.Sprintf("[lines 1-2 of 4; output limit of 262,144 bytes reached, %d more bytes; use offset=3 to read more]", len(l3)+2); r.Output != want {
		t.Errorf("wide lines: got %d bytes ending %q", len(r.Output), r.Output[len(r.Output)-120:])
	}

	// A single line longer than the limit shows its head.
	mustWrite(t, filepath.Join(cwd, "long.txt"), "short\n"+strings.Repeat("é", MaxOutputBytes)+"\nafter\n")
	r = runTool(t, env, "read_file", `{"path":"long.txt","offset":2}`)
	if r.Failed || !strings.HasSuffix(r.Output, fmt.Sprintf("\n[line 2 of 3 is longer than the output limit of 262,144 bytes; only its first %d bytes are shown. Use bash (e.g. `cut -c`, `fold`) to see the rest]", MaxOutputBytes)) {
		t.Errorf("long line ends %q", r.Output[len(r.Output)-200:])
	}
	if strings.ContainsRune(r.Output, '\uFFFD') {
		t.Error("a character was cut in half")
	}
}

func TestReadFileHomeAndWindowsPaths(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	mustWrite(t, filepath.Join(home, "notes.md"), "note\n")
	r := runTool(t, Env{Cwd: "/"}, "read_file", `{"path":"~/notes.md"}`)
	if r.Failed || r.Output != "note\n" {
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
	want := fmt.Sprintf("0\n[lines 1-1 of 200001; %d more bytes; use offset=2 to read more]", b.Len()-2)
	if r.Output != want {
		t.Errorf("got %q, want %q", r.Output, want)
	}
}
