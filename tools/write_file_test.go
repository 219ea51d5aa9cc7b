package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteFileNew(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd}
	c, err := Prepare(env, "write_file", `{"path":"a/b/new.txt","content":"one\ntwo\n"}`)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(cwd, "a", "b", "new.txt")
	if c.Proposal == nil || c.Proposal.OldText != nil || c.Proposal.NewText != "one\ntwo\n" || c.Proposal.Path != p {
		t.Errorf("proposal %+v", c.Proposal)
	}
	r := runCall(t, env, c)
	if r.Failed || r.Output != "Wrote 8 bytes (2 lines) to "+p+"; created the file." {
		t.Errorf("got %+v", r)
	}
	if r.Diff == nil || r.Diff.OldText != nil || r.Diff.NewText != "one\ntwo\n" || r.Diff.Path != p {
		t.Errorf("diff %+v", r.Diff)
	}
	assertFile(t, p, "one\ntwo\n")
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
	// No temporary file is left beside it.
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries", len(entries))
	}
}

func TestWriteFileOverwrite(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd}
	p := filepath.Join(cwd, "script.sh")
	mustWrite(t, p, "old\n")
	os.Chmod(p, 0o755)
	c, err := Prepare(env, "write_file", `{"path":"script.sh","content":"new"}`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Proposal.OldText == nil || *c.Proposal.OldText != "old\n" {
		t.Errorf("proposal %+v", c.Proposal)
	}
	r := runCall(t, env, c)
	if r.Failed || r.Output != "Wrote 3 bytes (1 lines) to "+p+"; replaced the previous 4 bytes." {
		t.Errorf("got %+v", r)
	}
	if r.Diff.OldText == nil || *r.Diff.OldText != "old\n" || r.Diff.NewText != "new" {
		t.Errorf("diff %+v", r.Diff)
	}
	assertFile(t, p, "new")
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o755 {
		t.Errorf("mode not kept: %v", st.Mode())
	}
	// The same content again is reported as such.
	r = runTool(t, env, "write_file", `{"path":"script.sh","content":"new"}`)
	if !strings.HasSuffix(r.Output, "the content was already the same.") {
		t.Errorf("got %q", r.Output)
	}
	// Empty content makes an empty file.
	r = runTool(t, env, "write_file", `{"path":"empty","content":""}`)
	if r.Failed || !strings.HasPrefix(r.Output, "Wrote 0 bytes (0 lines)") {
		t.Errorf("got %+v", r)
	}
}

func TestWriteFileFollowsSymlink(t *testing.T) {
	cwd := t.TempDir()
	target := filepath.Join(cwd, "real.txt")
	mustWrite(t, target, "before")
	link := filepath.Join(cwd, "link.txt")
	if err := os.Symlink("real.txt", link); err != nil {
		t.Fatal(err)
	}
	r := runTool(t, Env{Cwd: cwd}, "write_file", `{"path":"link.txt","content":"after"}`)
	if r.Failed || *r.Diff.OldText != "before" {
		t.Fatalf("got %+v", r)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced by a file")
	}
	assertFile(t, target, "after")
}

func TestWriteFileErrors(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd}
	mustMkdir(t, filepath.Join(cwd, "dir"))
	mustWrite(t, filepath.Join(cwd, "file"), "x")
	// A directory fails already in Prepare: there is nothing to propose.
	c, err := Prepare(env, "write_file", `{"path":"dir","content":"x"}`)
	if err == nil || err.Error() != filepath.Join(cwd, "dir")+" is a directory, not a file" || c == nil || c.Title != "write_file: dir" {
		t.Errorf("directory: %v %+v", err, c)
	}
	// A parent that is a file fails when it runs.
	_, err = Prepare(env, "write_file", `{"path":"file/sub.txt","content":"x"}`)
	if err == nil || err.Error() != filepath.Join(cwd, "file", "sub.txt")+" cannot exist: a parent of it is a file, not a directory" {
		t.Errorf("file as parent: %v", err)
	}
	// A parent that becomes a file after Prepare fails when it runs.
	c, err = Prepare(env, "write_file", `{"path":"late/sub.txt","content":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(cwd, "late"), "x")
	if r := runCall(t, env, c); !r.Failed || !strings.Contains(r.Output, "cannot exist") {
		t.Errorf("late file as parent: %+v", r)
	}
	// A directory that appears between Prepare and Run fails in Run.
	c, err = Prepare(env, "write_file", `{"path":"later2","content":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	mustMkdir(t, filepath.Join(cwd, "later2"))
	if r := runCall(t, env, c); !r.Failed || !strings.Contains(r.Output, "is a directory") {
		t.Errorf("late directory: %+v", r)
	}
}

func assertFile(t *testing.T, p, want string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("%s holds %q, want %q", p, b, want)
	}
}

// TestWriteSweepsStaleTemporaryFiles: the temporary file of a write that a
// kill -9 interrupted (".target.txt.mm-<random>") is removed when mm next
// writes in that folder, once it is old enough not to be a write in
// flight; files that only look alike are kept.
func TestWriteSweepsStaleTemporaryFiles(t *testing.T) {
	cwd := t.TempDir()
	env := Env{Cwd: cwd}
	old := time.Now().Add(-2 * time.Hour)
	stale := []string{".target.txt.mm-2743512345", ".other.go.mm-1"}
	keep := []string{".notes.txt.mm-backup", "target.txt.mm-12", ".mm-12", ".target.txt.mm-12.orig"}
	for _, n := range append(stale, keep...) {
		p := filepath.Join(cwd, n)
		mustWrite(t, p, "half a file")
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	fresh := filepath.Join(cwd, ".target.txt.mm-99") // another mm writing now
	mustWrite(t, fresh, "in flight")

	c, err := Prepare(env, "write_file", `{"path":"target.txt","content":"whole"}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := runCall(t, env, c); r.Failed {
		t.Fatal(r.Output)
	}
	assertFile(t, filepath.Join(cwd, "target.txt"), "whole")
	for _, n := range stale {
		if _, err := os.Lstat(filepath.Join(cwd, n)); err == nil {
			t.Errorf("%s is still there", n)
		}
	}
	for _, p := range append(keep, filepath.Base(fresh)) {
		if _, err := os.Lstat(filepath.Join(cwd, p)); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}
