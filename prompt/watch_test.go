package prompt

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// newWatch is a Watch closed at the test's end; the test is skipped off
// Linux.
func newWatch(t *testing.T) *Watch {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("inotify is Linux's")
	}
	w, err := NewWatch()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// TestWatch: a look stays the same until a file is made, written,
// renamed or removed in one of its folders, or a missing folder appears;
// a dropped look lets go of its watches.
func TestWatch(t *testing.T) {
	w := newWatch(t)
	root := tree(t, map[string]string{".git/HEAD": "x", "AGENTS.md": "rules", "w/x.go": ""})
	cwd := filepath.Join(root, "w")
	global := filepath.Join(root, "config", "mm") // not there yet
	f := Finder{Names: names, MaxBytes: 1000, Global: global}
	look := func() {
		t.Helper()
		if !w.Look("s1", f.Folders(root, cwd)) {
			t.Fatal("the folders could not be watched")
		}
		if !w.SameSince("s1", w.Ticket()) {
			t.Fatal("a look is not the same right after it")
		}
	}
	for _, change := range []struct {
		what string
		do   func() error
	}{
		{"a file written in place", func() error { return os.WriteFile(filepath.Join(root, "AGENTS.md"), []byte("new"), 0o644) }},
		{"a file made in the cwd", func() error { return os.WriteFile(filepath.Join(cwd, "CLAUDE.md"), []byte("c"), 0o644) }},
		{"a file renamed over", func() error {
			tmp := filepath.Join(cwd, ".AGENTS.md.tmp")
			if err := os.WriteFile(tmp, []byte("r"), 0o644); err != nil {
				return err
			}
			look() // the temporary file's making is not the change
			return os.Rename(tmp, filepath.Join(cwd, "AGENTS.md"))
		}},
		{"a file removed", func() error { return os.Remove(filepath.Join(cwd, "AGENTS.md")) }},
		{"the missing global folder made", func() error { return os.MkdirAll(global, 0o755) }},
	} {
		look()
		if err := change.do(); err != nil {
			t.Fatal(err)
		}
		if w.SameSince("s1", w.Ticket()) {
			t.Errorf("%s: the look is still the same", change.what)
		}
	}
	look()
	if err := os.WriteFile(filepath.Join(cwd, "sub.go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if w.SameSince("s1", w.Ticket()) {
		t.Error("any entry of a folder moves its generation on")
	}
	look()
	if !w.Look("s2", f.Folders(root, cwd)) || w.Watched() != 3 {
		t.Errorf("two looks at the same folders: %d watches, want 3 (global, root, cwd)", w.Watched())
	}
	w.Drop("s1")
	w.Drop("s2")
	if n := w.Watched(); n != 0 {
		t.Errorf("%d watches left once every look is dropped", n)
	}
	if w.SameSince("s1", w.Ticket()) {
		t.Error("a dropped look is the same")
	}
}

// TestWatchFollowsLinks: an instruction file that is a link to a file
// in another folder has that folder watched: a change made there is seen.
func TestWatchFollowsLinks(t *testing.T) {
	w := newWatch(t)
	root := tree(t, map[string]string{".git/HEAD": "x", "shared/rules.md": "shared rules", "w/x.go": ""})
	cwd := filepath.Join(root, "w")
	if err := os.Symlink(filepath.Join(root, "shared", "rules.md"), filepath.Join(cwd, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	f := Finder{Names: names, MaxBytes: 1000}
	files, _, watched := f.Watched(w, "s", root, cwd, nil, nil)
	if !watched || !w.SameSince("s", w.Ticket()) {
		t.Fatal("the folders could not be watched")
	}
	if len(files) != 1 || files[0].Text != "shared rules" {
		t.Fatalf("found %+v", files)
	}
	if err := os.WriteFile(filepath.Join(root, "shared", "rules.md"), []byte("new shared rules"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w.SameSince("s", w.Ticket()) {
		t.Error("a change to the file a link leads to was not seen")
	}
}

// TestWatchSharedReadsMissNothing: many sessions ask at once, each right
// after a change in its own folder, while the others' questions share the
// reads of the kernel's queue: every question made after a change sees it.
func TestWatchSharedReadsMissNothing(t *testing.T) {
	w := newWatch(t)
	const sessions, rounds = 8, 200
	var wg sync.WaitGroup
	errs := make(chan string, sessions*rounds)
	for i := range sessions {
		dir := t.TempDir()
		key := fmt.Sprint("s", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if !w.Look(key, []string{dir}) {
					errs <- "not watched"
					return
				}
				if !w.SameSince(key, w.Ticket()) {
					errs <- "not the same right after the look"
				}
				if err := os.WriteFile(filepath.Join(dir, "AGENTS.md"), []byte(fmt.Sprint(r)), 0o644); err != nil {
					errs <- err.Error()
					return
				}
				if w.SameSince(key, w.Ticket()) {
					errs <- fmt.Sprintf("%s, round %d: a change made before the question is not in its answer", key, r)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestWatchTicket: a prompt's ticket, taken as it reaches mm, lets a read
// of the kernel's queue that another session began since answer for it,
// and never one that began before it.
func TestWatchTicket(t *testing.T) {
	w := newWatch(t)
	d1, d2 := t.TempDir(), t.TempDir()
	change := func(r int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(d1, "AGENTS.md"), []byte(fmt.Sprint(r)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	look := func() {
		t.Helper()
		if !w.Look("s1", []string{d1}) || !w.Look("s2", []string{d2}) {
			t.Fatal("not watched")
		}
	}
	look()
	change(1)
	asked := w.Ticket()
	if !w.SameSince("s2", w.Ticket()) {
		t.Fatal("s2 changed")
	}
	if w.Ticket() == asked {
		t.Fatal("s2's question read no queue")
	}
	if w.SameSince("s1", asked) {
		t.Error("a change made before the question, read by another session's question since: not in the answer")
	}
	look()
	w.SameSince("s2", w.Ticket()) // a read before the change and the question
	change(2)
	if w.SameSince("s1", w.Ticket()) {
		t.Error("a change made before the question, with no read since: not in the answer")
	}
	look()
	if !w.SameSince("s1", w.Ticket()) {
		t.Error("no change: not the same")
	}
}
