package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/testwait"
)

// The tests of this file describe what every Backend does, and run against
// both: the file store and Postgres (on the package's throwaway server,
// pg, one schema per test). Where the two differ by design (fencing, which
// files do not have; finding a session by id alone), the test says so.

// testBackend is a Backend under test, with what the tests need to look
// behind it.
type testBackend struct {
	Backend
	name string
	key  *Key
	// raw returns the stored bytes of session id of cwd.
	raw func(t *testing.T, cwd, id string) []byte
	// spec tells a crash-test child how to open the same store.
	spec string
	// fenced says saves are fenced (Postgres).
	fenced bool
}

// backends lists the backends to test, each opened fresh and empty, with
// maxBytes as the largest session it reads (0: the default).
var backends = []struct {
	name string
	open func(t testing.TB, maxBytes int64) *testBackend
}{
	{"files", openFileBackend},
	{"postgres", openPGBackend},
}

func openFileBackend(t testing.TB, maxBytes int64) *testBackend {
	state := t.TempDir()
	key := OpenKey(state, func(s string) { t.Error(s) })
	const dir = ".mm/sessions"
	return &testBackend{
		Backend: NewFileStore(dir, &Reader{Key: key, MaxBytes: maxBytes}, OpenFolders(state), OpenOwners(state)),
		name:    "files", key: key, spec: "files",
		raw: func(t *testing.T, cwd, id string) []byte {
			t.Helper()
			b, err := os.ReadFile(Path(cwd, dir, id))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
}

func openPGBackend(t testing.TB, maxBytes int64) *testBackend {
	url := pgURL(t)
	ctx := testwait.Context(t)
	s, err := OpenPostgres(ctx, url, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &testBackend{
		Backend: s, name: "postgres", key: OpenKey(t.TempDir(), func(s string) { t.Error(s) }),
		spec: "postgres " + url, fenced: true,
		raw: func(t *testing.T, _, id string) []byte {
			t.Helper()
			var doc []byte
			if err := s.pool.QueryRow(context.Background(), `SELECT doc FROM mm_sessions WHERE id = $1`, id).Scan(&doc); err != nil {
				t.Fatal(err)
			}
			return doc
		},
	}
}

// eachBackend runs test against every backend, each fresh.
func eachBackend(t *testing.T, test func(t *testing.T, b *testBackend)) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) { test(t, bk.open(t, 0)) })
	}
}

// signed encodes f as mm writes it, signed with b's key.
func (b *testBackend) signed(t *testing.T, f *File) []byte {
	t.Helper()
	data, err := b.key.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// create stores f as a new session.
func (b *testBackend) create(t *testing.T, f *File) []byte {
	t.Helper()
	data := b.signed(t, f)
	if err := b.Create(context.Background(), f.Cwd, f.ID, data); err != nil {
		t.Fatal(err)
	}
	return data
}

// save saves data with w and waits until it is written.
func save(w *Writer, data []byte) {
	done := make(chan struct{})
	w.Save(data, func(error) { close(done) })
	<-done
}

// errorsOf collects a Writer's errors.
type errorsOf struct {
	mu   sync.Mutex
	errs []error
}

func (e *errorsOf) add(err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
}

func (e *errorsOf) list() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}

// at makes a small session of cwd, updated at t0 plus d, whose title is
// prompt.
func at(id, cwd string, d time.Duration, prompt string) *File {
	return &File{ID: id, Cwd: cwd, Created: t0, Updated: t0.Add(d), Provenance: Provenance{SessionID: id, Kind: "root"},
		History: []history.Message{{Role: history.RoleSystem, Content: "sys"}, {Role: history.RoleUser, Content: prompt + "\nmore"}}}
}

// TestBackendLoad: a stored session loads as it was encoded, signed; what
// is missing, damaged, newer or too large is refused with the error
// Reader.Load gives a file, on one line.
func TestBackendLoad(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t, 16<<10)
			ctx := context.Background()
			cwd := t.TempDir()
			in := sample()
			in.Cwd = cwd
			data := b.create(t, in)
			f, where, err := b.Load(ctx, cwd, in.ID)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := Unmarshal(data)
			want.Signed, want.Rev = true, f.Rev
			if !reflect.DeepEqual(f, want) {
				t.Errorf("Load = %+v\nwant %+v", f, want)
			}
			if !f.Signed || (f.Rev != 0) != b.fenced {
				t.Errorf("signed %v, rev %d", f.Signed, f.Rev)
			}
			if !bytes.Equal(b.raw(t, cwd, in.ID), data) {
				t.Error("the stored bytes are not the encoded document")
			}
			t.Logf("where: %s", where)

			check := func(id string, target error, words string) {
				t.Helper()
				_, _, err := b.Load(ctx, cwd, id)
				if !errors.Is(err, target) || !strings.Contains(err.Error(), words) || strings.ContainsAny(err.Error(), "\r\n") {
					t.Errorf("%s: Load = %v, want a one-line %v saying %q", id, err, target, words)
				}
				t.Logf("%s: %v", id, err)
			}
			check("20260916-101530-none", ErrNotFound, "20260916-101530-none")
			if _, _, err := b.Load(ctx, cwd, "20260916-101530-none"); b.name == "files" && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a missing session: %v does not wrap fs.ErrNotExist", err)
			}

			bad := at("20260916-101530-bad0", cwd, 0, "x")
			bad.History = bad.History[1:] // no system prompt first
			b.create(t, bad)
			check(bad.ID, ErrCorrupt, "system prompt")

			newer := at("20260916-101530-new0", cwd, 0, "x")
			raw := bytes.Replace(mustMarshal(t, newer), []byte(`"version":1`), []byte(`"version":2`), 1)
			if err := b.Create(ctx, cwd, newer.ID, raw); err != nil {
				t.Fatal(err)
			}
			check(newer.ID, ErrVersion, "upgrade mm")

			big := file("20260916-101530-big0", 40, 1000)
			big.Cwd = cwd
			b.create(t, big)
			check(big.ID, ErrRefused, "16 KiB")
		})
	}
}

// TestBackendList: a folder's sessions, newest first (ties: greater id
// first), with their titles and owners, from their headers; sessions of a
// newer format are left out; every folder's with ListAll.
func TestBackendList(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *testBackend) {
		ctx := context.Background()
		cwd, other := t.TempDir(), t.TempDir()
		if list, err := b.List(ctx, cwd); err != nil || list == nil || len(list) != 0 {
			t.Fatalf("an empty folder: %#v, %v", list, err)
		}
		b.create(t, at("20260916-101530-aaaa", cwd, 1*time.Hour, "oldest"))
		b.create(t, at("20260916-111530-bbbb", cwd, 3*time.Hour, "newest"))
		b.create(t, at("20260916-121530-cccc", cwd, 2*time.Hour, "tie low"))
		owned := at("20260916-121530-dddd", cwd, 2*time.Hour, "tie high")
		owned.Owner = "alice"
		b.create(t, owned)
		b.create(t, &File{ID: "untitled", Cwd: cwd, Updated: t0})
		b.create(t, at("20260916-131530-eeee", other, 4*time.Hour, "elsewhere"))
		newer := at("20260916-141530-ffff", cwd, 9*time.Hour, "future")
		if err := b.Create(ctx, cwd, newer.ID, bytes.Replace(mustMarshal(t, newer), []byte(`"version":1`), []byte(`"version":2`), 1)); err != nil {
			t.Fatal(err)
		}
		b.NoteFolder(cwd)
		b.NoteFolder(other)

		got, err := b.List(ctx, cwd)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"20260916-111530-bbbb", "20260916-121530-dddd", "20260916-121530-cccc", "20260916-101530-aaaa", "untitled"}
		if !slices.Equal(ids(got), want) {
			t.Fatalf("List = %v, want %v", ids(got), want)
		}
		if s := got[0]; s.Title != "newest" || s.Cwd != cwd || !s.Updated.Equal(t0.Add(3*time.Hour)) || s.Owner != "" {
			t.Errorf("first = %+v", s)
		}
		if s := got[1]; s.Owner != "alice" || s.Title != "tie high" {
			t.Errorf("second = %+v", s)
		}
		if got[4].Title != "" {
			t.Errorf("untitled: %+v", got[4])
		}

		all, err := b.ListAll(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if wantAll := append([]string{"20260916-131530-eeee"}, want...); !slices.Equal(ids(all), wantAll) {
			t.Errorf("ListAll = %v, want %v", ids(all), wantAll)
		}
		if all[0].Cwd != other {
			t.Errorf("ListAll's first is in %s, want %s", all[0].Cwd, other)
		}
	})
}

// TestBackendDelete: a deleted session is gone, and deleting it again
// finds nothing; spare keeps what it says is not the caller's.
func TestBackendDelete(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *testBackend) {
		ctx := context.Background()
		cwd := t.TempDir()
		folders := append(b.Folders(), t.TempDir(), cwd)
		gone := at("20260916-101530-gone", cwd, 0, "bye")
		b.create(t, gone)
		mine := at("20260916-101530-bobs", cwd, 0, "keep")
		mine.Owner = "bob"
		b.create(t, mine)

		where, err := b.Delete(ctx, gone.ID, folders, nil)
		if err != nil || where == "" {
			t.Fatalf("Delete = %q, %v", where, err)
		}
		t.Logf("deleted from %s", where)
		if _, _, err := b.Load(ctx, cwd, gone.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Load after Delete: %v", err)
		}
		if where, err := b.Delete(ctx, gone.ID, folders, nil); err != nil || where != "" {
			t.Errorf("Delete again = %q, %v; want nothing found", where, err)
		}

		notAlices := func(f *File, _, _ string) bool { return f.Owner != "alice" }
		if where, err := b.Delete(ctx, mine.ID, folders, notAlices); err != nil || where != "" {
			t.Errorf("alice deleted bob's session: %q, %v", where, err)
		}
		if _, _, err := b.Load(ctx, cwd, mine.ID); err != nil {
			t.Errorf("bob's session: %v", err)
		}
		notBobs := func(f *File, _, cwd string) bool { return f.Owner != "bob" || f.Cwd != cwd }
		if where, err := b.Delete(ctx, mine.ID, folders, notBobs); err != nil || where == "" {
			t.Errorf("bob could not delete his session: %q, %v", where, err)
		}
		if where, err := b.Delete(ctx, "20260916-101530-none", folders, notBobs); err != nil || where != "" {
			t.Errorf("a missing session with spare: %q, %v", where, err)
		}
	})
}

// TestBackendWriter: a session saved by its writer loads as the last save
// left it, byte for byte; loaded, it goes on being saved by a new writer
// (a restarted mm); forked, the copy is a session of its own.
func TestBackendWriter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *testBackend) {
		ctx := context.Background()
		cwd := t.TempDir()
		f := file("20260916-101530-wr00", 5, 100)
		f.Cwd = cwd
		var errs errorsOf
		w := b.Writer(cwd, f.ID, 0, errs.add)
		save(w, b.signed(t, f))
		f.History = fixtureHistory(9, 100)
		last := b.signed(t, f)
		w.Save(last, nil)
		w.Close()
		if len(errs.list()) != 0 {
			t.Fatalf("errors: %v", errs.list())
		}
		if !bytes.Equal(b.raw(t, cwd, f.ID), last) {
			t.Error("the stored bytes are not the last save's")
		}
		got, _, err := b.Load(ctx, cwd, f.ID)
		if err != nil || len(got.History) != 9 {
			t.Fatalf("Load = %v, %v", got, err)
		}

		// Another mm takes it up from where it was.
		w = b.Writer(cwd, f.ID, got.Rev, errs.add)
		got.History = fixtureHistory(13, 100)
		save(w, b.signed(t, got))
		w.Close()
		again, _, err := b.Load(ctx, cwd, f.ID)
		if err != nil || len(again.History) != 13 || len(errs.list()) != 0 {
			t.Fatalf("Load = %v, %v; errors %v", again, err, errs.list())
		}
		if b.fenced && again.Rev <= got.Rev {
			t.Errorf("rev %d after a save at %d", again.Rev, got.Rev)
		}

		// A fork: a new id, the history copied, saved by a writer of its own.
		fork := *again
		fork.ID, fork.Rev = "20260916-101530-fork", 0
		fork.Provenance = Provenance{SessionID: fork.ID, ParentSessionID: again.ID, Kind: "fork"}
		w = b.Writer(cwd, fork.ID, 0, errs.add)
		save(w, b.signed(t, &fork))
		w.Close()
		for _, id := range []string{f.ID, fork.ID} {
			s, _, err := b.Load(ctx, cwd, id)
			if err != nil || len(s.History) != 13 {
				t.Errorf("%s: %v, %v", id, s, err)
			}
		}
		if len(errs.list()) != 0 {
			t.Errorf("errors: %v", errs.list())
		}
	})
}

// TestBackendFencing: two activations of one session (two mm that loaded
// it at the same revision) save in turn: the first save wins, the other
// activation's save fails with ErrFenced, and it writes nothing more. In
// files no save is fenced: one mm at a time uses a folder's sessions.
func TestBackendFencing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *testBackend) {
		if !b.fenced {
			t.Skip("files are not fenced")
		}
		ctx := context.Background()
		cwd := t.TempDir()
		f := at("20260916-101530-fenc", cwd, 0, "two of us")
		b.create(t, f)
		loaded, _, err := b.Load(ctx, cwd, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		var errsA, errsB errorsOf
		a := b.Writer(cwd, f.ID, loaded.Rev, errsA.add)
		bw := b.Writer(cwd, f.ID, loaded.Rev, errsB.add)
		version := func(n int) []byte {
			c := *loaded
			c.History = fixtureHistory(n, 10)
			return b.signed(t, &c)
		}
		save(a, version(3))
		save(bw, version(4)) // fenced
		save(bw, version(5)) // not even tried
		save(a, version(6))
		a.Close()
		bw.Close()
		if e := errsA.list(); len(e) != 0 {
			t.Errorf("the first activation's errors: %v", e)
		}
		e := errsB.list()
		if len(e) != 1 || !errors.Is(e[0], ErrFenced) || strings.ContainsAny(e[0].Error(), "\r\n") {
			t.Fatalf("the second activation's errors: %v, want one ErrFenced", e)
		}
		t.Log(e[0])
		if !bytes.Equal(b.raw(t, cwd, f.ID), version(6)) {
			t.Error("the row is not the first activation's last save")
		}

		// The same race, both saving as fast as they can: exactly one
		// wins, whichever it is, and the loser stops at its first save
		// after the winner's.
		loaded, _, _ = b.Load(ctx, cwd, f.ID)
		var errs [2]errorsOf
		var last [2][]byte
		var wg sync.WaitGroup
		for i := range 2 {
			w := b.Writer(cwd, f.ID, loaded.Rev, errs[i].add)
			wg.Go(func() {
				defer w.Close()
				for n := range 20 {
					data := version(2 + i*100 + n)
					save(w, data)
					if len(errs[i].list()) == 0 {
						last[i] = data
					}
				}
			})
		}
		wg.Wait()
		n0, n1 := len(errs[0].list()), len(errs[1].list())
		if n0+n1 != 1 {
			t.Fatalf("errors %v and %v: want exactly one ErrFenced", errs[0].list(), errs[1].list())
		}
		winner := 0
		if n0 == 1 {
			winner = 1
		}
		if !errors.Is(errs[1-winner].list()[0], ErrFenced) {
			t.Errorf("the loser's error: %v", errs[1-winner].list()[0])
		}
		if !bytes.Equal(b.raw(t, cwd, f.ID), last[winner]) {
			t.Error("the row is not the winner's last save")
		}

		// A session deleted under a writer is not brought back.
		loaded, _, _ = b.Load(ctx, cwd, f.ID)
		var errsC errorsOf
		c := b.Writer(cwd, f.ID, loaded.Rev, errsC.add)
		if _, err := b.Delete(ctx, f.ID, nil, nil); err != nil {
			t.Fatal(err)
		}
		save(c, version(7))
		c.Close()
		if e := errsC.list(); len(e) != 1 || !errors.Is(e[0], ErrFenced) {
			t.Errorf("saving a deleted session: %v", e)
		}
		if _, _, err := b.Load(ctx, cwd, f.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("the deleted session came back: %v", err)
		}
	})
}

// check runs w.Check and returns what it answered.
func check(w *Writer) error {
	done := make(chan error, 1)
	w.Check(func(err error) { done <- err })
	return <-done
}

// TestBackendWriterCheck: a writer holds its session until another
// activation saves or deletes it (Postgres); its saves' done funcs get
// their errors; a file's writer always holds; a closed writer says so.
func TestBackendWriterCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *testBackend) {
		ctx := context.Background()
		cwd := t.TempDir()
		f := at("20260916-101530-chck", cwd, 0, "who holds it")
		data := b.create(t, f)
		loaded, _, err := b.Load(ctx, cwd, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		a := b.Writer(cwd, f.ID, loaded.Rev, nil)
		if a.Fences() != b.fenced {
			t.Errorf("Fences = %v, want %v", a.Fences(), b.fenced)
		}
		if err := check(a); err != nil {
			t.Fatalf("a fresh writer's check: %v", err)
		}
		saved := make(chan error, 1)
		a.Save(data, func(err error) { saved <- err })
		if err := <-saved; err != nil {
			t.Fatalf("a save's done: %v", err)
		}
		other := b.Writer(cwd, f.ID, loaded.Rev+1, nil)
		save(other, data)
		other.Close()
		err = check(a)
		switch {
		case !b.fenced && err != nil:
			t.Errorf("a file's writer after another's save: %v, want nil", err)
		case b.fenced && !errors.Is(err, ErrFenced):
			t.Errorf("the check after another activation's save: %v, want ErrFenced", err)
		}
		if b.fenced {
			a.Save(data, func(err error) { saved <- err })
			if err := <-saved; !errors.Is(err, ErrFenced) {
				t.Errorf("a save after a fenced check: %v, want ErrFenced", err)
			}
			t.Log(err)
		}
		a.Close()
		if err := check(a); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFenced) {
			t.Errorf("a closed writer's check: %v", err)
		}
	})
}

// killHelperEnv tells a re-executed test binary to act as the backend
// writer to kill: "<spec>\n<cwd>\n<id>".
const killHelperEnv = "MM_STORE_BACKEND_CRASH"

// TestHelperBackendWriter is not a test: run as a child of
// TestBackendCrashSafety, it saves one session through its backend's
// Writer in a tight loop until it is killed.
func TestHelperBackendWriter(t *testing.T) {
	env := os.Getenv(killHelperEnv)
	if env == "" {
		t.Skip("helper process for TestBackendCrashSafety")
	}
	parts := strings.Split(env, "\n")
	spec, cwd, id := parts[0], parts[1], parts[2]
	var b Backend = NewFileStore(".mm/sessions", nil, nil, nil)
	if url, ok := strings.CutPrefix(spec, "postgres "); ok {
		s, err := OpenPostgres(context.Background(), url, 0)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		b = s
	}
	var errs errorsOf
	open := func() *Writer {
		f, _, err := b.Load(context.Background(), cwd, id)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		return b.Writer(cwd, id, f.Rev, errs.add)
	}
	w := open()
	big, small := crashVersions(t, id)
	for i := 0; ; i++ {
		data := big
		if i%2 == 1 {
			data = small
		}
		save(w, data)
		if e := errs.list(); len(e) > 0 {
			if !errors.Is(e[0], ErrFenced) {
				fmt.Println("error:", e[0])
				os.Exit(1)
			}
			// The save the killed child had in flight was committed
			// after this one loaded the session: it is fenced, as a
			// second activation should be, and takes the session up
			// again, as its user would.
			w.Close()
			errs = errorsOf{}
			w = open()
		}
		if i == 1 {
			fmt.Println("writing")
		}
	}
}

// TestBackendCrashSafety kills writers with SIGKILL at random moments of
// their saving loop, and checks after every kill that the stored session
// is one of the two versions the writer alternates between, whole. Files
// make it so with a rename (TestCrashSafety kills more), Postgres with a
// transaction.
func TestBackendCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("kills 100+ child processes")
	}
	eachBackend(t, func(t *testing.T, b *testBackend) {
		const workers, killsEach = 2, 30
		cwd := t.TempDir()
		var wg sync.WaitGroup
		var mu sync.Mutex
		seen := map[string]int{}
		for w := range workers {
			id := fmt.Sprintf("20260916-101530-kill%03d", w)
			big, small := crashVersions(t, id)
			if err := b.Create(context.Background(), cwd, id, big); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for k := range killsEach {
					delay := time.Duration(k%20) * time.Millisecond
					if err := killHelper("TestHelperBackendWriter", killHelperEnv+"="+b.spec+"\n"+cwd+"\n"+id, delay); err != nil {
						t.Errorf("%s kill %d: %v", id, k, err)
						return
					}
					got := b.raw(t, cwd, id)
					which := ""
					switch {
					case bytes.Equal(got, big):
						which = "big"
					case bytes.Equal(got, small):
						which = "small"
					default:
						t.Errorf("%s kill %d: the stored session (%d bytes) is neither version", id, k, len(got))
						return
					}
					mu.Lock()
					seen[which]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		t.Logf("%d kills: found big %d times, small %d times", seen["big"]+seen["small"], seen["big"], seen["small"])
		if list, err := b.ListAll(context.Background(), []string{cwd}); err != nil || len(list) != workers {
			t.Errorf("List = %v, %v", list, err)
		}
	})
}
