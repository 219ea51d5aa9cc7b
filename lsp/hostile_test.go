package lsp

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/lsp/lsptest"
)

// heapGuard is where a test cuts an attack off: far above what a bounded
// client holds, far below what takes the machine down.
const heapGuard = 1 << 30

// attack starts a hostile fake and watches what it costs while fn runs.
// Past heapGuard the fake is killed, which ends the attack.
func attack(t *testing.T, e *env, fn func()) (peak uint64) {
	t.Helper()
	w := lsptest.WatchHeap(heapGuard, func() {
		for _, pid := range e.pids() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	fn()
	peak, took, cpu, tripped := w.Stop()
	t.Logf("heap grew by %.1f MiB at its peak; %v; %v of CPU", float64(peak)/(1<<20), took.Round(time.Millisecond), cpu.Round(time.Millisecond))
	if tripped {
		t.Errorf("the heap grew past %d MiB: the attack was cut off by the test", heapGuard>>20)
	}
	return peak
}

// TestHostileFraming: a server that writes what no frame bounds, or that
// asks for ever and reads nothing, is stopped at once; the call in flight
// says so on one line, and so does the log. The memory it costs is the
// bound, not what the server sent.
func TestHostileFraming(t *testing.T) {
	for _, tc := range []struct{ attack, why string }{
		{"endless-header", "a header over 4 KiB"},
		{"header-flood", "a header over 4 KiB"},
		{"huge-body", "a message of 1073741824 bytes, over the 32 MiB limit"},
		{"ask-flood", "64 answers to its requests unread"},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			e := newEnv(t, "-attack", tc.attack)
			var err error
			peak := attack(t, e, func() {
				_, err = e.c.Do(testwait.Context(t), Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
			})
			want := "lsp: the go server misbehaved (" + tc.why + "); stopped"
			if err == nil || err.Error() != want {
				t.Errorf("got %v, want %q", err, want)
			}
			if peak > 64<<20 {
				t.Errorf("the heap grew by %d MiB", peak>>20)
			}
			pid := e.pids()[0]
			waitFor(t, "the hostile server to die", func() bool { return !alive(pid) })
			if logs := e.logs.String(); !strings.Contains(logs, "level=WARN msg=\""+want+"\"") {
				t.Errorf("no warning in the log:\n%s", logs)
			}
		})
	}
}

// TestLogFlood: a server that floods window/logMessage is read at a
// bounded rate, in constant memory, its calls still answered; one that
// keeps the rate full for floodFor is stopped.
func TestLogFlood(t *testing.T) {
	testwait.Short(t, "the log flood, which takes floodWindows (10 s) to be stopped")
	e := newEnv(t, "-attack", "log-flood")
	peak := attack(t, e, func() {
		res := e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
		if !strings.Contains(res.Text, "func Foo() string") {
			t.Errorf("hover during the flood: %q", res.Text)
		}
		time.Sleep(2 * time.Second) // the flood goes on meanwhile
		res = e.do(Request{Action: "definition", Path: e.b, Line: 4, Column: 6})
		if want := e.a + ":4:6: func Foo() string {"; res.Text != want {
			t.Errorf("definition during the flood: %q", res.Text)
		}
	})
	if peak > 64<<20 {
		t.Errorf("the heap grew by %d MiB", peak>>20)
	}
	want := "lsp: the go server misbehaved (over 2000 messages a second for 10s); stopped"
	waitFor(t, "the flood to be stopped", func() bool { return strings.Contains(e.logs.String(), want) })
	if n := strings.Count(e.logs.String(), "lsp: server log"); n > 1000 {
		t.Errorf("%d of the server's log messages were logged", n)
	}
}

// TestTimeout: a server that never answers ends the call after lsp.timeout
// with an error that names the key; one that stops reading is stopped once
// a write to it has waited that long, and the next call starts another.
//
// The limit is short (500 ms) and the server never answers, so the limit
// is the only way out of a call. But a call's time covers the start of
// its server too, and on a loaded machine it can run out before the
// request is written: the steps that need the request to reach the server
// try again until it has (retry), which changes nothing for a server that
// got it already.
func TestTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	late := "lsp: the go server did not answer within 500ms (lsp.timeout)"
	t.Run("mute", func(t *testing.T) {
		e := newEnv(t)
		e.c = e.clientWith(Config{Servers: Servers{"go": fakeBin + " -attack mute -record " + e.record}, Timeout: timeout})
		ctx := testwait.Context(t)
		retry(t, "the hover reaching the server", func() {
			start := time.Now()
			_, err := e.c.Do(ctx, Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
			t.Logf("the call ended after %v", time.Since(start).Round(time.Millisecond))
			if err == nil || err.Error() != late {
				t.Fatalf("got %v, want %q", err, late)
			}
		}, func() bool { return e.count("textDocument/hover") >= 1 })
		waitFor(t, "$/cancelRequest", func() bool { return e.count("$/cancelRequest") >= 1 })
		// The server is kept: it may be slow rather than stuck.
		if _, err := e.c.Do(ctx, Request{Action: "symbols", Path: e.a}); err == nil || !strings.Contains(err.Error(), "did not answer") {
			t.Errorf("second call: %v", err)
		}
		if n := len(e.pids()); n != 1 {
			t.Errorf("%d servers started, want 1", n)
		}
	})
	t.Run("stops reading", func(t *testing.T) {
		e := newEnv(t)
		e.c = e.clientWith(Config{Servers: Servers{"go": fakeBin + " -record " + e.record}, Timeout: timeout})
		stall := filepath.Join(e.dir, "stall.go")
		e.write(stall, "package demo\n\nfunc Stall() {}\n")
		big := filepath.Join(e.dir, "big.go")
		e.write(big, "package demo\n\n"+strings.Repeat("// padding padding padding padding padding padding padding\n", 8000))
		ctx := testwait.Context(t)
		// The server stops reading once it has the hover on Stall.
		retry(t, "the hover on Stall reaching the server", func() {
			if _, err := e.c.Do(ctx, Request{Action: "hover", Path: stall, Line: 3, Column: 6}); err == nil || !strings.Contains(err.Error(), "did not answer") {
				t.Fatalf("hover on Stall: %v", err)
			}
		}, func() bool { return e.count("textDocument/hover") >= 1 })
		pid := e.pids()[0]
		// Opening a file larger than a pipe holds blocks in the write. The
		// write outlives the call that made it, so the test waits until no
		// call holds the server; a call whose time ran out before it wrote
		// anything is tried again.
		want := "lsp: the go server misbehaved (it stopped reading its input for 500ms); stopped"
		retry(t, "the stuck server being stopped", func() {
			_, err := e.c.Do(ctx, Request{Action: "symbols", Path: big})
			if err == nil {
				t.Fatal("symbols of a server that reads nothing succeeded")
			}
			t.Logf("symbols: %v", err)
			e.settle("go")
			if !strings.Contains(e.logs.String(), want) && len(e.pids()) != 1 {
				t.Fatalf("a second server started before the first was stopped: %v", e.pids())
			}
		}, func() bool { return strings.Contains(e.logs.String(), want) })
		waitFor(t, "the stuck server to be stopped", func() bool { return !alive(pid) })
		// The next call starts another server; the first try may spend its
		// time on the start, which goes on for the next.
		var res Result
		retry(t, "an answer from the new server", func() {
			var err error
			res, err = e.c.Do(ctx, Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
			if err != nil && err.Error() != late {
				t.Fatalf("the call after: %v", err)
			}
		}, func() bool { return strings.Contains(res.Text, "func Foo() string") })
		if n := len(e.pids()); n != 2 {
			t.Errorf("%d servers started, want 2", n)
		}
	})
}

// TestStderrFlood: a server that floods its stderr is read at a bounded
// rate, its lines logged within a budget, its calls still answered; one
// that keeps the rate full for floodWindows seconds is stopped.
func TestStderrFlood(t *testing.T) {
	testwait.Short(t, "the stderr flood, which takes floodWindows (10 s) to be stopped")
	e := newEnv(t, "-attack", "stderr-flood")
	peak := attack(t, e, func() {
		res := e.do(Request{Action: "hover", Path: e.a, Line: 4, Column: 6})
		if !strings.Contains(res.Text, "func Foo() string") {
			t.Errorf("hover during the flood: %q", res.Text)
		}
		time.Sleep(2 * time.Second) // the flood goes on meanwhile
	})
	if peak > 64<<20 {
		t.Errorf("the heap grew by %d MiB", peak>>20)
	}
	want := "lsp: the go server misbehaved (over 4 MiB of stderr a second for 10s); stopped"
	waitFor(t, "the flood to be stopped", func() bool { return strings.Contains(e.logs.String(), want) })
	if n := strings.Count(e.logs.String(), "lsp: server stderr\""); n > 1000 {
		t.Errorf("%d lines of the server's stderr were logged", n)
	}
}
