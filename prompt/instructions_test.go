package prompt

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tree writes files (path → text; a text "DIR" makes a folder) under a
// temporary folder and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, text := range files {
		full := filepath.Join(root, p)
		if text == "DIR" {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

var names = []string{"AGENTS.md", "CLAUDE.md"}

func TestDiscover(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		cwd   string
		max   int
		// want are the files found, as paths from the tree's root (the
		// global one as "global/…"), each with the start of its body.
		want []string
	}{
		{"git root to cwd, root first", map[string]string{
			".git/HEAD": "x", "AGENTS.md": "root rules", "a/AGENTS.md": "a rules", "a/b/CLAUDE.md": "b rules", "a/b/c/x.go": "",
			"a/b/c/d/AGENTS.md": "below cwd: not read now",
		}, "a/b/c", 1000, []string{"AGENTS.md: root rules", "a/AGENTS.md: a rules", "a/b/CLAUDE.md: b rules"}},
		{".git as a file (a worktree)", map[string]string{
			".git": "gitdir: elsewhere", "AGENTS.md": "root", "sub/AGENTS.md": "sub",
		}, "sub", 1000, []string{"AGENTS.md: root", "sub/AGENTS.md: sub"}},
		{"AGENTS.md before CLAUDE.md in one folder", map[string]string{
			".git/HEAD": "x", "AGENTS.md": "agents", "CLAUDE.md": "claude",
		}, ".", 1000, []string{"AGENTS.md: agents"}},
		{"no git root: the cwd alone", map[string]string{
			"AGENTS.md": "above, not a repo", "w/AGENTS.md": "cwd",
		}, "w", 1000, []string{"w/AGENTS.md: cwd"}},
		{"a folder named AGENTS.md is no file", map[string]string{
			".git/HEAD": "x", "AGENTS.md/x": "", "CLAUDE.md": "fallback",
		}, ".", 1000, []string{"CLAUDE.md: fallback"}},
		{"the global file first", map[string]string{
			"global/AGENTS.md": "mine", ".git/HEAD": "x", "p/AGENTS.md": "project",
		}, "p", 1000, []string{"global/AGENTS.md: mine", "p/AGENTS.md: project"}},
		{"cut at the budget, at a line, with a note; then skipped", map[string]string{
			".git/HEAD": "x", "AGENTS.md": "line one\nline two\nline three\n", "s/AGENTS.md": "never read",
		}, "s", 20, []string{"AGENTS.md: line one\nline two\n[… cut here: 11 more bytes", "s/AGENTS.md: [not included: the instructions already fill instructions.maxBytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.files)
			f := Finder{Names: names, MaxBytes: tc.max}
			if _, ok := tc.files["global/AGENTS.md"]; ok {
				f.Global = filepath.Join(root, "global")
			}
			cwd := filepath.Join(root, tc.cwd)
			gitRoot, _ := Root(cwd)
			got := f.Discover(gitRoot, cwd, nil)
			if len(got) != len(tc.want) {
				t.Fatalf("found %d files, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				path, body, _ := strings.Cut(w, ": ")
				if rel, _ := filepath.Rel(root, got[i].Path); rel != path {
					t.Errorf("file %d is %s, want %s", i, rel, path)
				}
				if b := got[i].body(); !strings.HasPrefix(b, body) {
					t.Errorf("%s reads %q, want it to start with %q", path, b, body)
				}
			}
		})
	}
}

// TestDiscoverKeepsUnchanged: a file whose size, time and budget are the
// same is not read again; one that changed is.
func TestDiscoverKeepsUnchanged(t *testing.T) {
	root := tree(t, map[string]string{".git/HEAD": "x", "AGENTS.md": "first"})
	f := Finder{Names: names, MaxBytes: 100}
	first := f.Discover(root, root, nil)
	first[0].Text = "kept from before" // what a read would not give
	if again := f.Discover(root, root, first); again[0].Text != "kept from before" {
		t.Errorf("an unchanged file was read again: %q", again[0].Text)
	}
	path := filepath.Join(root, "AGENTS.md")
	if err := os.WriteFile(path, []byte("second version"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if again := f.Discover(root, root, first); again[0].Text != "second version" {
		t.Errorf("a changed file was not read again: %q", again[0].Text)
	}
}

// TestDiscoverAllow: a file Allow refuses (outside a tenant's roots, or
// hidden) is not read; the next name in its folder may be.
func TestDiscoverAllow(t *testing.T) {
	root := tree(t, map[string]string{".git/HEAD": "x", "AGENTS.md": "secret", "CLAUDE.md": "fine", "w/AGENTS.md": "cwd"})
	cwd := filepath.Join(root, "w")
	f := Finder{Names: names, MaxBytes: 1000, Allow: func(p string) bool { return filepath.Base(p) != "AGENTS.md" || filepath.Dir(p) == cwd }}
	got := f.Discover(root, cwd, nil)
	if len(got) != 2 || got[0].Text != "fine" || got[1].Text != "cwd" {
		t.Errorf("found %+v", got)
	}
}

func TestNested(t *testing.T) {
	root := tree(t, map[string]string{
		".git/HEAD": "x", "AGENTS.md": "root", "w/x.go": "", "w/sub/AGENTS.md": "sub rules", "w/sub/deep/AGENTS.md": "deep rules",
		"w/sub/deep/a.go": "", "w/sub/b.go": "", "other/AGENTS.md": "sibling rules", "other/c.go": "", "w/plain/d.go": "",
	})
	cwd := filepath.Join(root, "w")
	f := Finder{Names: names, MaxBytes: 1000}
	seen := map[string]Stamp{}
	bodies := func(files []File) []string {
		var out []string
		for _, file := range files {
			out = append(out, file.Text)
			seen[file.Path] = file.Stamp
		}
		return out
	}
	at := func(p string) []string { return []string{filepath.Join(root, p)} }
	if got := bodies(f.Nested(root, cwd, at("w/sub/deep/a.go"), seen)); strings.Join(got, "|") != "sub rules|deep rules" {
		t.Errorf("first touch under sub/deep showed %q, want sub then deep", got)
	}
	if got := f.Nested(root, cwd, at("w/sub/b.go"), seen); len(got) != 0 {
		t.Errorf("sub's file was shown twice: %+v", got)
	}
	for _, p := range []string{"w/x.go", "w/plain/d.go", "w/sub/AGENTS.md"} {
		if got := f.Nested(root, cwd, at(p), seen); len(got) != 0 {
			t.Errorf("%s showed %+v, want nothing (the cwd's own files are in the system prompt)", p, got)
		}
	}
	if got := bodies(f.Nested(root, cwd, at("other/c.go"), seen)); strings.Join(got, "|") != "sibling rules" {
		t.Errorf("a sibling of the cwd in the repository showed %q", got)
	}
	if got := f.Nested(root, cwd, []string{"/etc/passwd", "relative/x"}, seen); len(got) != 0 {
		t.Errorf("paths outside the repository showed %+v", got)
	}
	// A file that changed is shown again.
	path := filepath.Join(root, "w/sub/AGENTS.md")
	if err := os.WriteFile(path, []byte("sub rules, new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := bodies(f.Nested(root, cwd, at("w/sub/b.go"), seen)); strings.Join(got, "|") != "sub rules, new" {
		t.Errorf("a changed file showed %q", got)
	}
	note := NestedNote(File{Path: path, Dir: filepath.Dir(path), Text: "rules\n"})
	if !strings.Contains(note, "[Project instructions from "+path+". They apply to every file under "+filepath.Dir(path)+"/") || !strings.HasSuffix(note, "rules\n[end of "+path+"]") {
		t.Errorf("note %q", note)
	}
}

func TestReadBoundedUTF8(t *testing.T) {
	root := tree(t, map[string]string{"f": strings.Repeat("é", 10)}) // 20 bytes
	text, cut := readBounded(filepath.Join(root, "f"), 7)
	if text != "ééé" || cut != 14 {
		t.Errorf("read %q, cut %d; want three whole characters and 14 bytes left", text, cut)
	}
}

// TestDiscoverAgain: a folder found empty before, whose stamp is the same
// and settled, is not looked into again; one whose time changed is, and
// so is one whose time was too close to the look to say anything.
func TestDiscoverAgain(t *testing.T) {
	root := tree(t, map[string]string{".git/HEAD": "x", "w/x.go": ""})
	cwd := filepath.Join(root, "w")
	old := time.Now().Add(-time.Minute)
	for _, dir := range []string{root, cwd} {
		if err := os.Chtimes(dir, old, old); err != nil {
			t.Fatal(err)
		}
	}
	f := Finder{Names: names, MaxBytes: 1000}
	files, empty := f.DiscoverAgain(root, cwd, nil, nil)
	if len(files) != 0 || len(empty) != 2 {
		t.Fatalf("found %+v, empty %+v; want none and two empty folders", files, empty)
	}
	// A file put in w behind the folder's time (its time set back): the
	// folder's stamp says nothing changed, and w is not looked into.
	path := filepath.Join(cwd, "AGENTS.md")
	if err := os.WriteFile(path, []byte("rules"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(cwd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(cwd, old, empty[1].Stamp.Mod); err != nil {
		t.Fatal(err)
	}
	if fi2, _ := os.Stat(cwd); fi2.Size() != empty[1].Stamp.Size {
		t.Skipf("the folder's size changed with a file in it (%d → %d): this file system cannot show the skip", empty[1].Stamp.Size, fi.Size())
	}
	if files, again := f.DiscoverAgain(root, cwd, nil, empty); len(files) != 0 || len(again) != 2 {
		t.Fatalf("a settled empty folder was looked into: %+v, %+v", files, again)
	}
	// Not settled: the previous look came right after the folder changed.
	soon := slices.Clone(empty)
	soon[1].Looked = soon[1].Stamp.Mod.Add(settled / 2)
	if files, _ := f.DiscoverAgain(root, cwd, nil, soon); len(files) != 1 || files[0].Text != "rules" {
		t.Errorf("a folder looked at too soon after its change was not looked into again: %+v", files)
	}
	// The folder's time as the file's creation left it: found.
	now := time.Now()
	if err := os.Chtimes(cwd, now, now); err != nil {
		t.Fatal(err)
	}
	files, again := f.DiscoverAgain(root, cwd, nil, empty)
	if len(files) != 1 || files[0].Text != "rules" || len(again) != 1 {
		t.Errorf("a file added to an empty folder was not found: %+v, empty %+v", files, again)
	}
	// Its folder now has a file: it is looked for by name, as the first
	// time, and a change made in place is read.
	if err := os.WriteFile(path, []byte("new rules"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if files, _ = f.DiscoverAgain(root, cwd, files, again); len(files) != 1 || files[0].Text != "new rules" {
		t.Errorf("a file changed in place was not read again: %+v", files)
	}
}
