package store

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mm-agent/mm/history"
)

// sample is a small session with every kind of entry a history may hold.
func sample() *File {
	return &File{
		ID:      "20260916-101530-4f2a9c1e",
		Cwd:     "/home/bob/project",
		Created: t0,
		Updated: t0.Add(90e9),
		Provenance: Provenance{
			SessionID: "20260916-101530-4f2a9c1e", ParentSessionID: "20260916-100000-00aa11bb",
			Kind: "continuation", CompressionDepth: 1,
		},
		Mode:  "yolo",
		Model: "qwen3-coder",
		Usage: Usage{Reported: true, Input: 5400, Output: 320, Thought: 42, ThoughtReported: true},
		History: []history.Message{
			{Role: history.RoleSystem, Content: "You are Bob."},
			{Role: history.RoleUser, Summary: true, Content: "Summary: the user asked to fix <main.go> & tests."},
			{Role: history.RoleUser, Content: "  \n  Why does `go test` fail?\nIt says FAIL.  "},
			{Role: history.RoleAssistant, Content: "Let me look.", ToolCalls: []history.ToolCall{
				{ID: "fc_1", Name: "bash", Arguments: `{"command":"go test ./..."}`},
				{ID: "fc_2", Name: "read_file", Arguments: `{"path":"main.go","limit":20}`},
			}},
			{
				Role: history.RoleTool, ToolCallID: "fc_1", Name: "bash", Content: "--- FAIL: TestX\nexit status 1",
				CallRef: "call_1", Title: "bash: go test ./...", Kind: "execute",
				RawInput: map[string]any{"command": "go test ./..."}, Failed: true,
			},
			{
				Role: history.RoleTool, ToolCallID: "fc_2", Name: "read_file", Content: "package main\n",
				CallRef: "call_2", Title: "read_file: main.go", Kind: "read",
				RawInput: map[string]any{"path": "main.go", "limit": float64(20)},
			},
			{Role: history.RoleAssistant, Content: "TestX expects 2 but gets 1."},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	in := sample()
	data := mustMarshal(t, in)
	if bytes.Contains(data, []byte("\n")) || bytes.Contains(data, []byte(`\u003c`)) {
		t.Errorf("Marshal should write compact JSON without HTML escapes:\n%s", data)
	}
	if in.Version != 0 || in.Title != "" {
		t.Errorf("Marshal modified its argument: version %d, title %q", in.Version, in.Title)
	}
	// The header must come before the history, for List.
	for _, key := range []string{`"version"`, `"id"`, `"cwd"`, `"updated"`, `"title"`} {
		if i, h := bytes.Index(data, []byte(key)), bytes.Index(data, []byte(`"history"`)); i < 0 || i > h {
			t.Errorf("%s is at byte %d, history at %d", key, i, h)
		}
	}
	out, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	want := *in
	want.Version = Version
	want.Title = "Why does `go test` fail?"
	if !reflect.DeepEqual(out, &want) {
		t.Errorf("round trip changed the file:\n got %+v\nwant %+v", out, &want)
	}
	if !out.Updated.Equal(in.Updated) || !out.Created.Equal(in.Created) {
		t.Errorf("times changed: %v %v", out.Created, out.Updated)
	}

	// An explicit title is kept, and a nil history is written as [].
	in = &File{ID: "x", Title: "mine"}
	data = mustMarshal(t, in)
	if !bytes.Contains(data, []byte(`"title":"mine"`)) || !bytes.HasSuffix(data, []byte(`"history":[]}`)) {
		t.Errorf("unexpected encoding: %s", data)
	}
}

func TestPathAndCheckID(t *testing.T) {
	if got, want := Path("/w", ".mm/sessions", "a"), "/w/.mm/sessions/a.json"; got != want {
		t.Errorf("relative dir: %q, want %q", got, want)
	}
	if got, want := Path("/w", "/var/mm/", "a"), "/var/mm/a.json"; got != want {
		t.Errorf("absolute dir: %q, want %q", got, want)
	}
	if got, want := Path("/w", ".mm/sessions", ""), "/w/.mm/sessions"; got != want {
		t.Errorf("directory: %q, want %q", got, want)
	}
	for _, id := range []string{"20260916-101530-4f2a9c1e", "a", "x.y"} {
		if err := CheckID(id); err != nil {
			t.Errorf("CheckID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", ".hidden", "../x", "a/b", `a\b`, "a\x00", strings.Repeat("a", 201)} {
		if CheckID(id) == nil {
			t.Errorf("CheckID(%q) accepted it", id)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	good := mustMarshal(t, sample())

	t.Run("missing", func(t *testing.T) {
		_, err := Load(filepath.Join(dir, "nope.json"))
		if !errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("got %v, want ErrNotFound and fs.ErrNotExist", err)
		}
		if errors.Is(err, ErrCorrupt) {
			t.Errorf("a missing file is not corrupt: %v", err)
		}
	})

	t.Run("truncated", func(t *testing.T) {
		for _, n := range []int{0, 1, len(good) / 2, len(good) - 1} {
			path := filepath.Join(dir, "cut.json")
			if err := os.WriteFile(path, good[:n], 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("cut at %d: got %v, want ErrCorrupt", n, err)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\r\n") || !strings.Contains(msg, "unexpected end of JSON input at byte") || !strings.Contains(msg, path) {
				t.Errorf("cut at %d: message %q should be one line naming the path and the byte", n, msg)
			}
			t.Logf("cut at %d: %v", n, err)
		}
	})

	t.Run("future version", func(t *testing.T) {
		for _, data := range [][]byte{
			bytes.Replace(good, []byte(`"version":1`), []byte(`"version":2`), 1),
			// A newer format that does not even fit this struct must
			// still be reported as newer, not as corrupt.
			[]byte(`{"version":7,"id":"x","history":{"segments":[]}}`),
		} {
			_, err := Unmarshal(data)
			if !errors.Is(err, ErrVersion) || errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrVersion", err)
			}
			if !strings.Contains(err.Error(), "upgrade mm") {
				t.Errorf("unclear message: %v", err)
			}
			t.Log(err)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		cases := map[string]string{
			"garbage":          "\x00\x01not json at all",
			"array":            `[1,2,3]`,
			"null":             `null`,
			"no version":       `{"id":"x","history":[]}`,
			"no id":            `{"version":1,"history":[]}`,
			"system not first": `{"version":1,"id":"x","history":[{"role":"user","content":"hi"}]}`,
			"trailing data":    string(good) + "}",
			"wrong type":       `{"version":1,"id":"x","history":[{"role":"system","content":3}]}`,
		}
		for name, data := range cases {
			_, err := Unmarshal([]byte(data))
			if !errors.Is(err, ErrCorrupt) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Errorf("%s: got %v, want a one-line ErrCorrupt", name, err)
				continue
			}
			t.Logf("%s: %v", name, err)
		}
	})

	t.Run("valid", func(t *testing.T) {
		path := filepath.Join(dir, "ok.json")
		if err := os.WriteFile(path, good, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := Load(path)
		if err != nil || f.ID != sample().ID {
			t.Fatalf("Load = %v, %v", f, err)
		}
		// An empty history is allowed: validation only concerns the
		// first message when there is one.
		if _, err := Unmarshal([]byte(`{"version":1,"id":"x","history":[]}`)); err != nil {
			t.Errorf("empty history refused: %v", err)
		}
	})
}

func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "sessions")
	path := filepath.Join(dir, "s.json")
	if err := WriteAtomic(path, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(path, []byte("second, longer")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "second, longer" {
		t.Errorf("file holds %q", got)
	}
	if err := WriteAtomic(path, []byte("3")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "3" {
		t.Errorf("file holds %q", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "s.json" {
		t.Errorf("directory holds %v, want only s.json", entries)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", st.Mode(), err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o755&^umask(t) {
		t.Errorf("dir mode %v, %v", st.Mode(), err)
	}

	// A failed write leaves the old file and no temporary file: here the
	// target is a directory, so the rename fails.
	if err := os.Mkdir(filepath.Join(dir, "d.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(filepath.Join(dir, "d.json"), []byte("x")); err == nil {
		t.Error("writing over a directory succeeded")
	}
	entries, _ = os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("a failed write left files behind: %v", entries)
	}
	// A parent that is a file cannot become a directory.
	if err := WriteAtomic(filepath.Join(path, "x.json"), []byte("x")); err == nil {
		t.Error("writing under a file succeeded")
	}
}

// umask returns the process umask as the permission bits it clears, by
// creating a directory with 0o777 and looking at what it got.
func umask(t *testing.T) fs.FileMode {
	d := filepath.Join(t.TempDir(), "probe")
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(d)
	if err != nil {
		t.Fatal(err)
	}
	return 0o777 &^ st.Mode().Perm()
}
