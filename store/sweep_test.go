package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// plant writes files named names in dir, last modified at mtime.
func plant(t *testing.T, dir string, mtime time.Time, names ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte("{\"version\":1,"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStaleTemporaryFilesAreRemoved: what a killed mm left in a sessions
// folder (its own temporary files, old enough not to be a write in
// flight) goes when the folder is next listed or saved in; nothing else
// does.
func TestStaleTemporaryFilesAreRemoved(t *testing.T) {
	old := time.Now().Add(-2 * time.Hour)
	stale := []string{".20260916-101530-aaaa.json.tmp-2743512345", ".20260916-101530-bbbb.json.tmp-7"}
	others := []string{
		"notes.json.tmp-12",                     // no leading dot: not mm's name
		".20260916-101530-aaaa.json.tmp-x1",     // not CreateTemp's random part
		".20260916-101530-aaaa.json.tmp-",       // no random part at all
		".20260916-101530-aaaa.txt.tmp-1234",    // not a session file's
		".20260916-101530-aaaa.json.tmp-12.bak", // something else
	}
	check := func(t *testing.T, dir string, fresh string) {
		t.Helper()
		for _, n := range stale {
			if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
				t.Errorf("%s is still there", n)
			}
		}
		for _, n := range append(others, fresh) {
			if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
				t.Errorf("%s was removed: %v", n, err)
			}
		}
	}
	const fresh = ".20260916-101530-cccc.json.tmp-31337" // a write in flight elsewhere

	t.Run("listed", func(t *testing.T) {
		cwd := t.TempDir()
		root := Path(cwd, ".mm/sessions", "")
		plant(t, root, old, append(stale, others...)...)
		plant(t, root, time.Now(), fresh)
		if _, err := List(cwd, ".mm/sessions"); err != nil {
			t.Fatal(err)
		}
		check(t, root, fresh)
	})
	t.Run("saved", func(t *testing.T) {
		cwd := t.TempDir()
		root := Path(cwd, ".mm/sessions", "")
		plant(t, root, old, append(stale, others...)...)
		plant(t, root, time.Now(), fresh)
		writeSession(t, cwd, ".mm/sessions", file("20260916-101530-aaaa", 3, 10))
		check(t, root, fresh)
	})
}
