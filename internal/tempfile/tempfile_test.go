package tempfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMatch(t *testing.T) {
	for name, want := range map[string]string{
		".a.txt.mm-1":               "a.txt",
		".a.txt.mm-4294967295":      "a.txt",
		".x.mm-1.mm-22":             "x.mm-1",
		".a.txt.mm-":                "",
		".a.txt.mm-12345678901":     "", // more digits than CreateTemp writes
		".a.txt.mm-12a":             "",
		"a.txt.mm-12":               "",
		".mm-12":                    "",
		"..mm-12":                   "",
		".a.txt.mm-12.orig":         "",
		".notes.mm-backup":          "",
		".20260916-1.json.tmp-7":    "",
		".20260916-1.json.mm-7.tmp": "",
	} {
		got, ok := Match(name, ".mm-")
		if got != want || ok != (want != "") {
			t.Errorf("Match(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

// TestSweepSparesWritesInFlight: an old temporary file that a write of
// this process holds is kept; once done, the next sweep removes it.
func TestSweepSparesWritesInFlight(t *testing.T) {
	dir := t.TempDir()
	f, err := Create(dir, ".a.txt.mm-*")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(f.Name(), old, old); err != nil {
		t.Fatal(err)
	}
	ours := func(n string) bool { _, ok := Match(n, ".mm-"); return ok }
	if n := Sweep(dir, "test", ours); n != 0 {
		t.Fatalf("removed %d file(s) in flight", n)
	}
	Done(f.Name())
	mu.Lock()
	delete(swept, filepath.Clean(dir)+"\x00test") // as if a minute had passed
	mu.Unlock()
	if n := Sweep(dir, "test", ours); n != 1 {
		t.Fatalf("removed %d file(s), want the one no write holds", n)
	}
	// A second sweep within the minute does not read the folder.
	if err := os.WriteFile(f.Name(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(f.Name(), old, old)
	if n := Sweep(dir, "test", ours); n != 0 {
		t.Errorf("swept again within %v", SweepEvery)
	}
}
