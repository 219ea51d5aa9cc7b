package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReaderRefuses: a link (even to a sound session file), a directory,
// and a file over the limit are refused by Load with one line naming the
// path, and skipped by List with one warning each, told once.
func TestReaderRefuses(t *testing.T) {
	cwd := t.TempDir()
	const dir = ".mm/sessions"
	root := Path(cwd, dir, "")
	good := file("20260916-101530-good", 3, 100)
	writeSession(t, cwd, dir, good)
	big := file("20260916-101530-big0", 40, 100)
	writeSession(t, cwd, dir, big)
	elsewhere := filepath.Join(t.TempDir(), "real.json")
	if err := os.WriteFile(elsewhere, mustMarshal(t, file("20260916-101530-link", 3, 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{"20260916-101530-big0": "bytes (only regular files of at most"}
	if err := os.Symlink(elsewhere, filepath.Join(root, "20260916-101530-link.json")); err == nil {
		refused["20260916-101530-link"] = "a symbolic link"
	} else {
		t.Logf("no symbolic links here: %v", err)
	}
	if err := os.Mkdir(filepath.Join(root, "20260916-101530-dir0.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	refused["20260916-101530-dir0"] = "a directory"
	refused = plantSpecial(t, root, refused)

	limit := int64(len(mustMarshal(t, good))) + 100
	var warnings []string
	r := &Reader{MaxBytes: limit, Warn: func(s string) { warnings = append(warnings, s) }}
	for id, why := range refused {
		_, err := r.Load(Path(cwd, dir, id))
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), id+".json") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Load = %v, want a one-line refusal (%s)", id, err, why)
		}
	}
	if f, err := r.Load(Path(cwd, dir, good.ID)); err != nil || f.ID != good.ID {
		t.Errorf("the sound file: %v", err)
	}
	for range 2 {
		list, err := r.List(cwd, dir)
		if err != nil || len(list) != 1 || list[0].ID != good.ID {
			t.Fatalf("List = %v, %v", list, err)
		}
	}
	if len(warnings) != len(refused) {
		t.Errorf("%d warnings for %d refused files: %q", len(warnings), len(refused), warnings)
	}
	for _, w := range warnings {
		if strings.Contains(w, "\n") || !strings.Contains(w, "skipped "+root) {
			t.Errorf("warning %q", w)
		}
	}
}
