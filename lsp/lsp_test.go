package lsp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/lsp/lsptest"
)

// fakeBin is the fake language server: a link named "fakelsp" to this test
// binary, which runs lsptest.Main when started under that name.
var fakeBin string

func TestMain(m *testing.M) {
	switch {
	case filepath.Base(os.Args[0]) == "fakelsp":
		os.Exit(lsptest.Main(os.Args[1:]))
	case len(os.Args) > 1 && os.Args[1] == "fakelsp-child":
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	// The fake runs as this binary, built with -race, whose runtime sleeps a
	// second at exit to let late race reports through; the fake has none to
	// wait for, and Close would wait that second for every server.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	dir, err := os.MkdirTemp("", "lsp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exe, err := os.Executable()
	if err == nil {
		fakeBin = filepath.Join(dir, "fakelsp")
		err = os.Symlink(exe, fakeBin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

const fixtureA = `package demo

// Foo greets.
func Foo() string {
	return "foo"
}

func Bar() {
	s := "é😀😀"; _ = Foo() + s
}

// Legacy is old.
func Legacy() {}

type Server struct {
	addr string
	port int
}

func (s *Server) Start() error {
	return nil
}

func Slow() {}

func Crash() {}

func LinkTarget() {}
`

const fixtureB = `package demo

func useFoo() {
	_ = Foo()
}
`

// env is a workspace with the fixture files, a fake server configured for
// Go files, and a Client.
type env struct {
	t      *testing.T
	dir    string
	a, b   string // the fixture files
	record string // the fake's record file
	logs   *syncbuf.Buffer
	c      *Client
}

func newEnv(t *testing.T, flags ...string) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), logs: &syncbuf.Buffer{}}
	e.a = filepath.Join(e.dir, "a.go")
	e.b = filepath.Join(e.dir, "b.go")
	e.record = filepath.Join(t.TempDir(), "record.jsonl")
	e.write(e.a, fixtureA)
	e.write(e.b, fixtureB)
	command := strings.Join(append([]string{fakeBin, "-record", e.record}, flags...), " ")
	e.c = e.client(Servers{"go": command})
	return e
}

// client makes a Client rooted at the workspace, closed when the test
// ends.
func (e *env) client(servers Servers) *Client {
	return e.clientWith(Config{Servers: servers})
}

// clientWith makes a Client of cfg, rooted at the workspace, closed when
// the test ends. Without a timeout of its own, a call is bounded by the
// hang bound rather than lsp.timeout's 30 s: a test that is not about the
// timeout must not fail because a loaded machine was slow to answer.
func (e *env) clientWith(cfg Config) *Client {
	if cfg.Timeout == 0 {
		cfg.Timeout = testwait.Hang
	}
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := NewClient(cfg, e.dir, "session-1", log)
	e.t.Cleanup(c.Close)
	return c
}

func (e *env) write(path, text string) {
	e.t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) do(r Request) Result {
	e.t.Helper()
	res, err := e.c.Do(context.Background(), r)
	if err != nil {
		e.t.Fatalf("%+v: %v", r, err)
	}
	return res
}

func (e *env) fail(r Request) string {
	e.t.Helper()
	res, err := e.c.Do(context.Background(), r)
	if err == nil {
		e.t.Fatalf("%+v: no error, got %q", r, res.Text)
	}
	if strings.Contains(err.Error(), "\n") {
		e.t.Errorf("error on more than one line: %q", err)
	}
	return err.Error()
}

func (e *env) records() []lsptest.Record {
	e.t.Helper()
	rs, err := lsptest.ReadRecords(e.record)
	if err != nil {
		e.t.Fatal(err)
	}
	return rs
}

// count counts the records of a method.
func (e *env) count(method string) int {
	n := 0
	for _, r := range e.records() {
		if r.Method == method {
			n++
		}
	}
	return n
}

// pids lists the pids of the fakes started, in order.
func (e *env) pids() []int {
	var out []int
	for _, r := range e.records() {
		if r.Method == "start" {
			out = append(out, r.PID)
		}
	}
	return out
}

// waitFor polls until cond holds. The deadline guards against a hang; it
// is no speed requirement.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", testwait.Hang, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// retry repeats try until done holds, within the hang bound. It is for a
// call under a short lsp.timeout whose effect a loaded machine may not
// reach in time (the call's time can run out while the server starts,
// before the request is written): each try is checked by try itself, and
// after it done is given a second to show the effect before the next try.
// Where it is used a try too many changes nothing, so the verdict does not
// depend on how soon the effect shows.
func retry(t *testing.T, what string, try func(), done func() bool) (tries int) {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for tries = 1; ; tries++ {
		try()
		if t.Failed() {
			t.FailNow()
		}
		for wait := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
			if done() {
				if tries > 1 {
					t.Logf("%s took %d tries", what, tries)
				}
				return tries
			}
			if time.Now().After(wait) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen in %d tries over %v", what, tries, testwait.Hang)
		}
	}
}

// settle waits until no call holds the language's server: the goroutine of
// a call that returned at its timeout has then finished with the server.
func (e *env) settle(lang string) {
	e.t.Helper()
	e.c.mu.Lock()
	s := e.c.slots[lang]
	e.c.mu.Unlock()
	if s == nil {
		return
	}
	select {
	case s.turn <- struct{}{}:
		<-s.turn
	case <-time.After(testwait.Hang):
		e.t.Fatalf("a call held the %s server for %v", lang, testwait.Hang)
	}
}

// alive says whether a process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !os.IsNotExist(err)
	}
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	return len(f) > 0 && f[0][0] != 'Z' && f[0][0] != 'X'
}

func TestDefinition(t *testing.T) {
	e := newEnv(t)
	// From b.go, where Foo is used, to a.go, where it is declared; the fake
	// answers with a single Location, not a list.
	res := e.do(Request{Action: "definition", Path: e.b, Line: 4, Column: 6})
	if want := e.a + ":4:6: func Foo() string {"; res.Text != want {
		t.Errorf("got %q, want %q", res.Text, want)
	}
	if res.Edits != nil {
		t.Errorf("definition made edits: %v", res.Edits)
	}
	// A list of LocationLinks.
	res = e.do(Request{Action: "definition", Path: e.a, Line: 28, Column: 8})
	if want := e.a + ":28:6: func LinkTarget() {}"; res.Text != want {
		t.Errorf("got %q, want %q", res.Text, want)
	}
	// A name the server knows no definition of.
	res = e.do(Request{Action: "definition", Path: e.a, Line: 4, Column: 12})
	if want := "no definition found for string at line 4, column 12"; res.Text != want {
		t.Errorf("got %q, want %q", res.Text, want)
	}
}

func TestReferences(t *testing.T) {
	e := newEnv(t)
	res := e.do(Request{Action: "references", Path: e.a, Line: 4, Column: 7})
	want := strings.Join([]string{
		e.a + ":3:4: // Foo greets.",
		e.a + ":4:6: func Foo() string {",
		e.a + `:9:18: s := "é😀😀"; _ = Foo() + s`,
		e.b + ":4:6: _ = Foo()",
	}, "\n")
	if res.Text != want {
		t.Errorf("got\n%s\nwant\n%s", res.Text, want)
	}
}

func TestHover(t *testing.T) {
	e := newEnv(t)
	res := e.do(Request{Action: "hover", Path: e.b, Line: 4, Column: 8})
	if want := "```go\nfunc Foo() string\n```\n\nFoo greets."; res.Text != want {
		t.Errorf("got %q, want %q", res.Text, want)
	}
	// The MarkedString forms: a string and {language, value}, in a list.
	res = e.do(Request{Action: "hover", Path: e.a, Line: 13, Column: 6})
	if want := "Legacy is old.\n\n```go\nfunc Legacy() {}\n```"; res.Text != want {
		t.Errorf("got %q, want %q", res.Text, want)
	}
	res = e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 12})
	if want := "no hover information found for string at line 4, column 12"; res.Text != want {
		t.Errorf("got %q, want %q", res.Text, want)
	}
}

func TestSymbols(t *testing.T) {
	e := newEnv(t)
	res := e.do(Request{Action: "symbols", Path: e.a})
	want := strings.Join([]string{
		"4:6 function Foo () string",
		"8:6 function Bar ()",
		"13:6 function Legacy () {}",
		"15:6 struct Server",
		"  16:2 field addr string",
		"  17:2 field port int",
		"  20:18 method Start",
		"24:6 function Slow () {}",
		"26:6 function Crash () {}",
		"28:6 function LinkTarget () {}",
	}, "\n")
	if res.Text != want {
		t.Errorf("got\n%s\nwant\n%s", res.Text, want)
	}
}

func TestSymbolsFlat(t *testing.T) {
	e := newEnv(t, "-flat")
	res := e.do(Request{Action: "symbols", Path: e.a})
	lines := strings.Split(res.Text, "\n")
	if len(lines) != 10 || lines[4] != "16:2 field addr (in Server)" || lines[6] != "20:18 method Start (in Server)" {
		t.Errorf("got\n%s", res.Text)
	}
}

func TestUTF16Columns(t *testing.T) {
	e := newEnv(t)
	// Line 9 is `	s := "é😀😀"; _ = Foo() + s`: Foo starts at character 18,
	// UTF-16 unit 19 (counting from 0) and byte 24 (from 0).
	for _, col := range []int{18, 19, 20, 21} {
		res := e.do(Request{Action: "definition", Path: e.a, Line: 9, Column: col})
		if want := e.a + ":4:6: func Foo() string {"; res.Text != want {
			t.Errorf("column %d: got %q, want %q", col, res.Text, want)
		}
	}
	// Column 10 is the second 😀, after the first: no symbol.
	if got, want := e.fail(Request{Action: "hover", Path: e.a, Line: 9, Column: 10}), "no symbol at line 9, column 10"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// The position sent was in UTF-16 units.
	var sent []int
	for _, r := range e.records() {
		if r.Method == "textDocument/definition" {
			var p struct {
				Position struct{ Line, Character int }
			}
			if err := json.Unmarshal(r.Params, &p); err != nil {
				t.Fatal(err)
			}
			sent = append(sent, p.Position.Character)
		}
	}
	if fmt.Sprint(sent) != "[19 20 21 22]" {
		t.Errorf("sent characters %v, want [19 20 21 22]", sent)
	}
}

func TestRename(t *testing.T) {
	for _, form := range []string{"documentChanges", "changes"} {
		t.Run(form, func(t *testing.T) {
			var flags []string
			if form == "changes" {
				flags = append(flags, "-changes")
			}
			e := newEnv(t, flags...)
			res := e.do(Request{Action: "rename", Path: e.b, Line: 4, Column: 6, NewName: "Greet"})
			wantA := strings.NewReplacer("// Foo greets.", "// Greet greets.", "func Foo()", "func Greet()", "_ = Foo()", "_ = Greet()").Replace(fixtureA)
			wantB := strings.Replace(fixtureB, "_ = Foo()", "_ = Greet()", 1)
			want := []Edit{
				{Path: e.a, OldText: fixtureA, NewText: wantA},
				{Path: e.b, OldText: fixtureB, NewText: wantB},
			}
			if len(res.Edits) != 2 {
				t.Fatalf("got %d edits: %+v", len(res.Edits), res.Edits)
			}
			for i := range want {
				if res.Edits[i] != want[i] {
					t.Errorf("edit %d:\ngot  %+v\nwant %+v", i, res.Edits[i], want[i])
				}
			}
			if want := "renamed Foo to Greet: 4 changes in 2 files\n" + e.a + "\n" + e.b; res.Text != want {
				t.Errorf("got %q, want %q", res.Text, want)
			}
			// The caller applies edits, not Do.
			if b, _ := os.ReadFile(e.a); string(b) != fixtureA {
				t.Error("Do changed a.go on disk")
			}
		})
	}
}

func TestRenameFailures(t *testing.T) {
	e := newEnv(t)
	if got, want := e.fail(Request{Action: "rename", Path: e.b, Line: 4, Column: 6, NewName: "1x"}), `fakelsp: invalid identifier "1x"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	got := e.fail(Request{Action: "rename", Path: e.b, Line: 4, Column: 6, NewName: "MakeFile"})
	if !strings.Contains(got, "create, rename or delete files") {
		t.Errorf("got %q", got)
	}
	if got, want := e.fail(Request{Action: "rename", Path: e.b, Line: 4, Column: 6}), "rename needs new_name"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestFileChangedOnDisk(t *testing.T) {
	e := newEnv(t)
	res := e.do(Request{Action: "definition", Path: e.a, Line: 9, Column: 18})
	if want := e.a + ":4:6: func Foo() string {"; res.Text != want {
		t.Fatalf("got %q, want %q", res.Text, want)
	}
	// a.go is open in the server now; two lines are added above Foo.
	e.write(e.a, strings.Replace(fixtureA, "package demo\n", "package demo\n\n// one\n// two", 1))
	res = e.do(Request{Action: "definition", Path: e.a, Line: 11, Column: 18})
	if want := e.a + ":6:6: func Foo() string {"; res.Text != want {
		t.Errorf("after the change: got %q, want %q", res.Text, want)
	}
	var change lsptest.Record
	for _, r := range e.records() {
		if r.Method == "textDocument/didChange" {
			change = r
		}
	}
	if change.Method == "" {
		t.Fatal("no didChange")
	}
	var p struct {
		TextDocument   struct{ Version int }
		ContentChanges []map[string]any
	}
	if err := json.Unmarshal(change.Params, &p); err != nil {
		t.Fatal(err)
	}
	if p.TextDocument.Version != 2 || len(p.ContentChanges) != 1 || p.ContentChanges[0]["range"] != nil ||
		!strings.Contains(p.ContentChanges[0]["text"].(string), "// two") {
		t.Errorf("didChange: %s", change.Params)
	}

	// b.go was never opened, but it appeared in an answer: when it changes,
	// the server is told, since it reads b.go from disk.
	e.do(Request{Action: "references", Path: e.a, Line: 6, Column: 6})
	e.write(e.b, fixtureB+"\nfunc more() { _ = Foo() }\n")
	res = e.do(Request{Action: "references", Path: e.a, Line: 6, Column: 6})
	if !strings.Contains(res.Text, e.b+":7:19: func more() { _ = Foo() }") {
		t.Errorf("references after b.go changed:\n%s", res.Text)
	}
	found := false
	for _, r := range e.records() {
		if r.Method == "workspace/didChangeWatchedFiles" && strings.Contains(string(r.Params), "b.go") {
			found = true
		}
	}
	if !found {
		t.Error("the server was not told that b.go changed")
	}

	// A file that is gone is closed.
	os.Remove(e.a)
	e.do(Request{Action: "hover", Path: e.b, Line: 4, Column: 6})
	if e.count("textDocument/didClose") != 1 {
		t.Error("a.go, removed, was not closed")
	}
}

func TestServerReused(t *testing.T) {
	e := newEnv(t)
	e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
	e.do(Request{Action: "references", Path: e.b, Line: 4, Column: 6})
	e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
	if n := e.count("initialize"); n != 1 {
		t.Errorf("%d initialize, want 1", n)
	}
	if n := e.count("initialized"); n != 1 {
		t.Errorf("%d initialized, want 1", n)
	}
	if n := len(e.pids()); n != 1 {
		t.Errorf("%d servers started, want 1", n)
	}
	// The server runs in the workspace, in a process group of its own, with
	// the session's mark.
	start := e.records()[0]
	if start.Method != "start" || start.Cwd != e.dir || start.PGID != start.PID || start.Session != "session-1" {
		t.Errorf("server started as %+v", start)
	}
	// a.go is opened once, and not changed, since it did not change.
	if n := e.count("textDocument/didOpen"); n != 2 {
		t.Errorf("%d didOpen, want 2 (a.go and b.go)", n)
	}
	if n := e.count("textDocument/didChange"); n != 0 {
		t.Errorf("%d didChange, want 0", n)
	}
	// The server's own requests were answered: configuration with a null
	// per item, a refresh with null.
	answered := map[string]string{}
	for _, r := range e.records() {
		if r.Method == "" {
			answered[string(r.ID)] = string(r.Result)
		}
	}
	if answered[`"cfg-1"`] != "[null]" {
		t.Errorf("workspace/configuration answered %q", answered[`"cfg-1"`])
	}
	if _, ok := answered[`"refresh-1"`]; !ok {
		t.Error("the refresh request was not answered")
	}
	// The server's stderr goes to the log, at debug level.
	waitFor(t, "stderr in the log", func() bool {
		return strings.Contains(e.logs.String(), `level=DEBUG msg="lsp: server stderr" lang=go server=fakelsp line="fakelsp: initialized"`)
	})
}

func TestNoServerConfigured(t *testing.T) {
	e := newEnv(t)
	py := filepath.Join(e.dir, "x.py")
	e.write(py, "x = 1\n")
	if got, want := e.fail(Request{Action: "hover", Path: py, Line: 1, Column: 1}), "no language server is configured for .py files; configure lsp.servers.python"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := e.fail(Request{Action: "symbols", Path: filepath.Join(e.dir, "x.xyz")}), "the lsp tool does not know the language of .xyz files"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := e.fail(Request{Action: "hover", Path: "a.go", Line: 1, Column: 1}), `the path must be absolute; got "a.go"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := e.fail(Request{Action: "jump", Path: e.a}); !strings.HasPrefix(got, `unknown lsp action "jump"`) {
		t.Errorf("got %q", got)
	}
	if got, want := e.fail(Request{Action: "hover", Path: e.a, Line: 0, Column: 1}), "line and column count from 1; got line 0, column 1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := e.fail(Request{Action: "hover", Path: e.a, Line: 40, Column: 1}), "line 40 is past the end of "+e.a+", which has 28 lines"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := e.fail(Request{Action: "hover", Path: e.a, Line: 9, Column: 40}), "column 40 is past the end of line 9, which has 26 characters"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	missing := filepath.Join(e.dir, "missing.go")
	if got, want := e.fail(Request{Action: "symbols", Path: missing}), "cannot read "+missing+": no such file or directory"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if len(e.pids()) != 1 {
		t.Errorf("%d servers started", len(e.pids()))
	}
}

func TestMissingCommand(t *testing.T) {
	e := newEnv(t)
	c := e.client(Servers{"go": "mm-no-such-language-server --stdio"})
	_, err := c.Do(context.Background(), Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
	want := `mm-no-such-language-server did not start: it is not installed or not on PATH (lsp.servers.go is "mm-no-such-language-server --stdio")`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestServerExitsAtStart(t *testing.T) {
	e := newEnv(t, "-exit-at-start")
	got := e.fail(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
	if want := "fakelsp did not start: fakelsp exited (exit status 2); its last stderr line: fakelsp: cannot start: no workspace here"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCrashBetweenCalls(t *testing.T) {
	e := newEnv(t)
	e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
	first := e.pids()
	if len(first) != 1 {
		t.Fatalf("pids %v", first)
	}
	p, err := os.FindProcess(first[0])
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		t.Fatal(err)
	}
	// No wait for the death to be seen: the call right after must cope.
	res := e.do(Request{Action: "definition", Path: e.b, Line: 4, Column: 6})
	if want := e.a + ":4:6: func Foo() string {"; res.Text != want {
		t.Errorf("got %q, want %q", res.Text, want)
	}
	pids := e.pids()
	if len(pids) != 2 || pids[1] == first[0] {
		t.Errorf("pids %v, want a second server", pids)
	}
	if n := e.count("initialize"); n != 2 {
		t.Errorf("%d initialize, want 2", n)
	}
}

func TestCrashDuringCall(t *testing.T) {
	e := newEnv(t)
	e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
	// Hover on Crash kills the server, and again the server restarted once.
	got := e.fail(Request{Action: "hover", Path: e.a, Line: 26, Column: 6})
	if want := "fakelsp exited (exit status 3); its last stderr line: panic: fakelsp crashed on purpose"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if n := len(e.pids()); n != 2 {
		t.Errorf("%d servers started, want 2", n)
	}
	// The next call starts a new one.
	res := e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
	if !strings.Contains(res.Text, "func Foo() string") {
		t.Errorf("got %q", res.Text)
	}
	if n := len(e.pids()); n != 3 {
		t.Errorf("%d servers started, want 3", n)
	}
}

func TestCancel(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := e.c.Do(ctx, Request{Action: "hover", Path: e.a, Line: 24, Column: 6})
		done <- err
	}()
	var id json.RawMessage
	waitFor(t, "the hover request", func() bool {
		for _, r := range e.records() {
			if r.Method == "textDocument/hover" {
				id = r.ID
				return true
			}
		}
		return false
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	waitFor(t, "$/cancelRequest", func() bool {
		for _, r := range e.records() {
			if r.Method == "$/cancelRequest" {
				var p struct{ ID json.RawMessage }
				_ = json.Unmarshal(r.Params, &p)
				return string(p.ID) == string(id)
			}
		}
		return false
	})
	// The server is still there for the next call.
	res := e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
	if !strings.Contains(res.Text, "func Foo() string") {
		t.Errorf("got %q", res.Text)
	}
	if n := len(e.pids()); n != 1 {
		t.Errorf("%d servers started, want 1", n)
	}
	// A context cancelled already stops before anything.
	if _, err := e.c.Do(ctx, Request{Action: "hover", Path: e.a, Line: 4, Column: 6}); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v", err)
	}
}

func TestStuckServer(t *testing.T) {
	e := newEnv(t)
	stall := filepath.Join(e.dir, "stall.go")
	e.write(stall, "package demo\n\nfunc Stall() {}\n")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.c.Do(ctx, Request{Action: "hover", Path: stall, Line: 3, Column: 6})
		done <- err
	}()
	waitFor(t, "the hover request", func() bool { return e.count("textDocument/hover") == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// The server reads nothing now: opening a file larger than a pipe holds
	// blocks in the write, and the call still returns when cancelled.
	big := filepath.Join(e.dir, "big.go")
	e.write(big, "package demo\n\n"+strings.Repeat("// padding padding padding padding padding padding padding\n", 8000))
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		_, err := e.c.Do(ctx, Request{Action: "symbols", Path: big})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the call reach the write; no harm if it did not
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	pid := e.pids()[0]
	e.c.Close()
	if alive(pid) {
		t.Errorf("the stuck server %d outlived Close", pid)
	}
}

func TestClose(t *testing.T) {
	for _, flags := range [][]string{{"-child"}, {"-child", "-ignore-exit"}} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			e := newEnv(t, flags...)
			e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
			var pid, child int
			for _, r := range e.records() {
				switch r.Method {
				case "start":
					pid = r.PID
				case "child":
					child = r.Child
				}
			}
			if pid == 0 || child == 0 || !alive(pid) || !alive(child) {
				t.Fatalf("server %d, child %d", pid, child)
			}
			e.c.Close()
			if alive(pid) {
				t.Errorf("the server %d outlived Close", pid)
			}
			if alive(child) {
				t.Errorf("the server's child %d outlived Close", child)
			}
			if got := e.count("shutdown") == 1 && e.count("exit") == 1; !got {
				t.Errorf("shutdown and exit were not both sent once: %d, %d", e.count("shutdown"), e.count("exit"))
			}
			if got := e.fail(Request{Action: "hover", Path: e.a, Line: 4, Column: 6}); got != "the lsp client is closed" {
				t.Errorf("Do after Close: %q", got)
			}
			e.c.Close() // a second Close returns too
		})
	}
}

func TestConcurrentCalls(t *testing.T) {
	e := newEnv(t)
	py := filepath.Join(e.dir, "p.py")
	e.write(py, "func Foo() {}\n")
	pyRecord := filepath.Join(t.TempDir(), "py.jsonl")
	c := e.client(Servers{
		"go":     fakeBin + " -record " + e.record,
		"python": fakeBin + " -record " + pyRecord,
	})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			r := Request{Action: "hover", Path: e.a, Line: 4, Column: 6}
			if i%2 == 1 {
				r = Request{Action: "definition", Path: py, Line: 1, Column: 6}
			}
			if _, err := c.Do(context.Background(), r); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := e.count("initialize"); n != 1 {
		t.Errorf("go: %d initialize, want 1", n)
	}
	rs, _ := lsptest.ReadRecords(pyRecord)
	n := 0
	for _, r := range rs {
		if r.Method == "initialize" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("python: %d initialize, want 1", n)
	}
}
