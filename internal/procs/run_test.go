package procs

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestRun runs real bash through Run: input, outputs, exit status, the
// time limit and the cancel, and a background job that holds the output
// pipe.
func TestRun(t *testing.T) {
	ctx := testwait.Context(t)

	t.Run("combined output in order, with the exit status", func(t *testing.T) {
		var out bytes.Buffer
		started := 0
		o, err := Run(ctx, Bash("echo one; echo two >&2; echo three; exit 3"), IO{Stdout: &out, Timeout: testwait.Hang, Started: func() { started++ }})
		if err != nil {
			t.Fatal(err)
		}
		if o.End != Exited || o.State == nil || o.State.ExitCode() != 3 || o.WaitErr == nil {
			t.Errorf("outcome %+v, want exited with status 3", o)
		}
		if out.String() != "one\ntwo\nthree\n" {
			t.Errorf("output %q", out.String())
		}
		if started != 1 {
			t.Errorf("Started called %d times", started)
		}
	})

	t.Run("stdin, and stderr apart", func(t *testing.T) {
		var out, errs bytes.Buffer
		input := bytes.Repeat([]byte("x"), 1<<20) // more than a pipe holds
		o, err := Run(ctx, Bash("wc -c; echo oops >&2"), IO{Stdin: input, Stdout: &out, Stderr: &errs, Timeout: testwait.Hang})
		if err != nil {
			t.Fatal(err)
		}
		if o.End != Exited || o.WaitErr != nil {
			t.Errorf("outcome %+v", o)
		}
		if strings.TrimSpace(out.String()) != "1048576" || errs.String() != "oops\n" {
			t.Errorf("stdout %q, stderr %q", out.String(), errs.String())
		}
	})

	t.Run("a command that never reads its stdin", func(t *testing.T) {
		var out bytes.Buffer
		o, err := Run(ctx, Bash("echo done"), IO{Stdin: bytes.Repeat([]byte("x"), 4<<20), Stdout: &out, Timeout: testwait.Hang})
		if err != nil || o.End != Exited || out.String() != "done\n" {
			t.Errorf("outcome %+v, %v, output %q", o, err, out.String())
		}
	})

	t.Run("the time limit kills the group", func(t *testing.T) {
		var out bytes.Buffer
		start := time.Now()
		o, err := Run(ctx, Bash("echo before; sleep 600 & sleep 600"), IO{Stdout: &out, Timeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("ended after %s", time.Since(start))
		if o.End != TimedOut || out.String() != "before\n" {
			t.Errorf("outcome %+v, output %q", o, out.String())
		}
	})

	t.Run("a cancel kills the group", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		var out bytes.Buffer
		done := make(chan Outcome, 1)
		go func() {
			o, _ := Run(cctx, Bash("echo started; exec sleep 600"), IO{Stdout: &out, Timeout: testwait.Hang, Started: func() {}})
			done <- o
		}()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case o := <-done:
			if o.End != Cancelled {
				t.Errorf("outcome %+v, want cancelled", o)
			}
		case <-time.After(testwait.Hang):
			t.Fatal("Run did not return after the cancel")
		}
	})

	t.Run("a background job holding the pipe does not hold the run", func(t *testing.T) {
		var out bytes.Buffer
		start := time.Now()
		o, err := Run(ctx, Bash("(sleep 5; echo late) & echo now"), IO{Stdout: &out, Timeout: testwait.Hang})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("returned after %s", time.Since(start))
		if o.End != Exited || out.String() != "now\n" {
			t.Errorf("outcome %+v, output %q", o, out.String())
		}
	})

	t.Run("a command that cannot start", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		if _, err := Run(ctx, Bash("true"), IO{Stdout: &bytes.Buffer{}}); !errors.Is(err, ErrNoBash) {
			t.Errorf("got %v, want ErrNoBash", err)
		}
	})
}
