package store

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mm-agent/mm/history"
)

// writeSession writes f at its Path under cwd and dir.
func writeSession(t *testing.T, cwd, dir string, f *File) {
	t.Helper()
	if err := WriteAtomic(Path(cwd, dir, f.ID), mustMarshal(t, f)); err != nil {
		t.Fatal(err)
	}
}

func ids(s []Summary) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i].ID
	}
	return out
}

func TestList(t *testing.T) {
	cwd := t.TempDir()
	const dir = ".mm/sessions"
	mk := func(id string, updated time.Time, prompt string) *File {
		return &File{ID: id, Cwd: cwd, Created: t0, Updated: updated, History: []history.Message{
			{Role: history.RoleSystem, Content: "sys"}, {Role: history.RoleUser, Content: prompt + "\nrest"},
		}}
	}
	writeSession(t, cwd, dir, mk("20260916-101530-aaaa", t0.Add(1*time.Hour), "oldest"))
	writeSession(t, cwd, dir, mk("20260916-111530-bbbb", t0.Add(3*time.Hour), "newest"))
	writeSession(t, cwd, dir, mk("20260916-121530-cccc", t0.Add(2*time.Hour), "tie low"))
	writeSession(t, cwd, dir, mk("20260916-121530-dddd", t0.Add(2*time.Hour), "tie high"))
	// No title at all: the header ends at "history".
	writeSession(t, cwd, dir, &File{ID: "untitled", Cwd: cwd, Updated: t0})

	root := Path(cwd, dir, "")
	good := mustMarshal(t, mk("valid-inside", t0.Add(9*time.Hour), "hidden"))
	junk := map[string][]byte{
		"corrupt.json":                   []byte("{\"version\":1,\"id\":"),
		"garbage.json":                   []byte("\x00\x01\x02"),
		"empty.json":                     nil,
		"array.json":                     []byte("[]"),
		"future.json":                    bytes.Replace(mustMarshal(t, mk("future", t0, "x")), []byte(`"version":1`), []byte(`"version":2`), 1),
		"misnamed.json":                  good, // its id is valid-inside
		".valid-inside.json":             good, // dot names are temporary files
		".valid-inside.json.tmp-1234567": good,
		"valid-inside.json.tmp-99":       good,
		"notes.txt":                      good,
	}
	for name, data := range junk {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "sub.json"), 0o755); err != nil {
		t.Fatal(err)
	}

	got, err := List(cwd, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"20260916-111530-bbbb", "20260916-121530-dddd", "20260916-121530-cccc", "20260916-101530-aaaa", "untitled"}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("List = %v, want %v", ids(got), want)
	}
	if got[0].Title != "newest" || got[0].Cwd != cwd || !got[0].Updated.Equal(t0.Add(3*time.Hour)) {
		t.Errorf("first summary = %+v", got[0])
	}
	if got[4].Title != "" {
		t.Errorf("untitled session has title %q", got[4].Title)
	}

	// An absolute dir is used as is.
	abs, err := List("/nonexistent-cwd", root)
	if err != nil || len(abs) != len(want) {
		t.Errorf("absolute dir: %v, %v", ids(abs), err)
	}
}

func TestListMissingDir(t *testing.T) {
	got, err := List(t.TempDir(), "no/such/dir")
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("List = %#v, %v; want an empty list", got, err)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestListReadsHeaderOnly: List decodes a file's header, never its history.
// The huge file's history is cut short, which a List that decoded it would
// find and skip the file for; a sound header is listed all the same. How
// long it took is logged, not asserted.
func TestListReadsHeaderOnly(t *testing.T) {
	cwd := t.TempDir()
	const dir = "sessions"
	f := file("huge", 50_000, 100)
	data := mustMarshal(t, f)
	if err := WriteAtomic(Path(cwd, dir, "huge"), data[:len(data)-len(data)/4]); err != nil {
		t.Fatal(err)
	}
	writeSession(t, cwd, dir, file("small", 5, 100))

	// The header decoder stops long before the history's end: through the
	// same 4 KiB buffered reader List uses, it reads one buffer.
	cr := &countingReader{r: bytes.NewReader(data)}
	h, err := readHeader(json.NewDecoder(bufio.NewReaderSize(cr, 4096)))
	if err != nil || h.id != "huge" || h.title == "" || h.version != Version {
		t.Fatalf("readHeader = %+v, %v", h, err)
	}
	if cr.n > 4096 {
		t.Errorf("readHeader read %d of %d bytes", cr.n, len(data))
	}

	start := time.Now()
	got, err := List(cwd, dir)
	elapsed := time.Since(start)
	if err != nil || len(got) != 2 {
		t.Fatalf("List = %v, %v", got, err)
	}
	if got[0].Title != "Fix the failing test number 1" {
		t.Errorf("title %q", got[0].Title)
	}
	t.Logf("List over a %d MB, 50k-message file: %v", len(data)>>20, elapsed)
}
