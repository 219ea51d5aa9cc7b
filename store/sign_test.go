package store

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// load reads path with r and fails the test on an error.
func load(t *testing.T, r *Reader, path string) *File {
	t.Helper()
	f, err := r.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSignature: what Key.Marshal writes loads as Signed with the same key,
// and as unsigned with another key, with none, after any change to its
// bytes, and when written by Marshal (an mm from before signatures).
func TestSignature(t *testing.T) {
	state := t.TempDir()
	key := OpenKey(state, func(s string) { t.Error(s) })
	dir := t.TempDir()
	f := sample()
	data, err := key.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte(`"}`)) || !bytes.Contains(data, []byte(`,"mac":"`)) {
		t.Fatalf("no signature at the end of %s", data[len(data)-100:])
	}
	// Older readers ignore the field: the file is valid JSON and the rest
	// of it is what Marshal writes.
	plain, _ := Marshal(f)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil || m["mac"] == nil || !bytes.HasPrefix(data, plain[:len(plain)-1]) {
		t.Fatalf("signed file: %v", err)
	}
	path := filepath.Join(dir, f.ID+".json")
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(data)
	if got := load(t, &Reader{Key: key}, path); !got.Signed || got.ID != f.ID {
		t.Errorf("the user's own file: signed %v", got.Signed)
	}
	// The same user in another process: the key is read from the file.
	if got := load(t, &Reader{Key: OpenKey(state, nil)}, path); !got.Signed {
		t.Error("another process of the same user does not trust the file")
	}
	for name, r := range map[string]*Reader{
		"another user": {Key: OpenKey(t.TempDir(), nil)},
		"no key":       {},
	} {
		if load(t, r, path).Signed {
			t.Errorf("%s: signed", name)
		}
	}
	flip := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		return c
	}
	macAt := bytes.LastIndex(data, []byte(`,"mac":"`)) + len(`,"mac":"`)
	for name, b := range map[string][]byte{
		"unsigned (older mm)":  plain,
		"a byte of the title":  bytes.Replace(data, []byte(`"title":"`), []byte(`"title":"x`), 1),
		"a byte of the mac":    flip(data, macAt+3),
		"mac upper-cased":      append(bytes.Clone(data[:macAt]), append(bytes.ToUpper(data[macAt:len(data)-2]), '"', '}')...),
		"mac moved":            append(bytes.Replace(data[:macAt-len(`,"mac":"`)], []byte(`{"version":1,`), []byte(`{"version":1,"mac":"`+string(data[macAt:macAt+64])+`",`), 1), '}'),
		"a newline at the end": append(bytes.Clone(data), '\n'),
	} {
		write(b)
		got, err := (&Reader{Key: key}).Load(path)
		if err == nil && got.Signed {
			t.Errorf("%s: signed", name)
		}
	}
}

// TestKeyMadeOnceByRacingProcesses: readers that open the key at the same
// time, none there yet, all end with the same one, 0600.
func TestKeyMadeOnceByRacingProcesses(t *testing.T) {
	state := filepath.Join(t.TempDir(), "mm") // made by the first one
	const n = 16
	keys := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i] = OpenKey(state, func(s string) { t.Error(s) }).bytes()
		}()
	}
	wg.Wait()
	for i := range keys {
		if len(keys[i]) != 32 || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("key %d = %x, key 0 = %x", i, keys[i], keys[0])
		}
	}
	fi, err := os.Stat(filepath.Join(state, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(state)
	if len(entries) != 1 {
		t.Errorf("the state dir holds %d entries, want the key alone", len(entries))
	}
}

// TestUnusableKey: a key that others can read, or that is not one mm made,
// signs nothing and trusts nothing, and says why once; so does no state
// directory at all.
func TestUnusableKey(t *testing.T) {
	if OpenKey("", nil) != nil {
		t.Error("a key without a state directory")
	}
	var nilKey *Key
	if data, err := nilKey.Marshal(sample()); err != nil || bytes.Contains(data, []byte(`"mac"`)) {
		t.Errorf("a nil key signed: %v", err)
	}
	cases := map[string]struct {
		text string
		mode os.FileMode
		want string
	}{
		"garbage": {"not a key\n", 0o600, "not a key mm made"},
	}
	if runtime.GOOS != "windows" {
		cases["readable by others"] = struct {
			text string
			mode os.FileMode
			want string
		}{strings.Repeat("ab", 32) + "\n", 0o644, "can be read by other users"}
	}
	for name, c := range cases {
		state := t.TempDir()
		p := filepath.Join(state, KeyFile)
		if err := os.WriteFile(p, []byte(c.text), c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		var warned []string
		k := OpenKey(state, func(s string) { warned = append(warned, s) })
		data, err := k.Marshal(sample())
		if err != nil || bytes.Contains(data, []byte(`"mac"`)) {
			t.Errorf("%s: signed with an unusable key", name)
		}
		k.verify(bytes.NewReader(data), int64(len(data)))
		if len(warned) != 1 || !strings.Contains(warned[0], c.want) || strings.Contains(warned[0], "\n") {
			t.Errorf("%s: warnings %q, want one line with %q", name, warned, c.want)
		}
		if b, _ := os.ReadFile(p); string(b) != c.text {
			t.Errorf("%s: the key file was changed", name)
		}
	}
}
