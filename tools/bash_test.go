//go:build unix

package tools

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
)

// runBash prepares and runs one bash call.
func runBash(t *testing.T, ctx context.Context, env Env, args string) Result {
	t.Helper()
	c, err := Prepare(env, "bash", args)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return Run(ctx, env, c)
}

func bashCall(command string, timeout ...float64) string {
	m := fmt.Sprintf(`{"command":%s`, strconv.Quote(command))
	if len(timeout) > 0 {
		m += fmt.Sprintf(`,"timeout":%v`, timeout[0])
	}
	return m + "}"
}

func TestBashOutputAndExitCode(t *testing.T) {
	cwd := t.TempDir()
	mustWrite(t, filepath.Join(cwd, "here.txt"), "x")
	env := Env{Cwd: cwd}
	tests := []struct {
		name, command, want string
	}{
		{"success", "echo hello", "hello\n[exit code: 0]"},
		{"no output", "true", "[exit code: 0]"},
		{"non-zero exit is not a failure", "echo oops; exit 3", "oops\n[exit code: 3]"},
		{"stderr is combined in order", "echo out; echo err >&2; echo out2", "out\nerr\nout2\n[exit code: 0]"},
		{"no final newline", "printf abc", "abc\n[exit code: 0]"},
		{"runs in the cwd", "ls", "here.txt\n[exit code: 0]"},
		{"stdin is /dev/null", "cat; echo done", "done\n[exit code: 0]"},
		{"bash syntax", "for i in 1 2; do echo $i; done | tac", "2\n1\n[exit code: 0]"},
		{"command not found", "no-such-command-xyz 2>/dev/null", "[exit code: 127]"},
		{"killed by a signal", "kill -SEGV $$", "[exit code: 139 (killed by signal: segmentation fault)]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBash(t, context.Background(), env, bashCall(tt.command))
			if r.Failed || r.Output != tt.want {
				t.Errorf("got %+v, want output %q", r, tt.want)
			}
			if r.Diff != nil {
				t.Error("bash gave a diff")
			}
		})
	}
}

func TestBashBadCwd(t *testing.T) {
	env := Env{Cwd: filepath.Join(t.TempDir(), "gone")}
	r := runBash(t, context.Background(), env, bashCall("true"))
	if !r.Failed || !strings.Contains(r.Output, "cannot run bash in") {
		t.Errorf("got %+v", r)
	}
}

// TestBashTimeout drives the limit with a command that never ends, so that
// the limit is the only way out. What the command printed before the limit
// is kept, and the children it started are killed; a machine too slow to
// reach the echo within the limit gives a shorter output, not a failure.
func TestBashTimeout(t *testing.T) {
	env := Env{Cwd: t.TempDir()}
	start := time.Now()
	r := runBash(t, context.Background(), env, bashCall("sleep 1000 & echo $! > bg; echo started; sleep 1000", 0.3))
	t.Logf("the timeout returned after %v", time.Since(start))
	marker := "[timed out after 300ms; the command and its child processes were killed]"
	if !r.Failed || (r.Output != "started\n"+marker && r.Output != marker) {
		t.Errorf("got %+v, want %q", r, "started\n"+marker)
	}
	if r.Output == marker {
		t.Log("the limit came before the echo on this machine")
	}
	if b, err := os.ReadFile(filepath.Join(env.Cwd, "bg")); err == nil && len(strings.Fields(string(b))) > 0 {
		for _, pid := range waitForLines(t, filepath.Join(env.Cwd, "bg"), 1) {
			waitDead(t, pid, "the timeout's child")
		}
	}
	// The environment's default applies when the call gives none.
	env.BashTimeout = 200 * time.Millisecond
	r = runBash(t, context.Background(), env, bashCall("sleep 1000"))
	if !r.Failed || !strings.Contains(r.Output, "[timed out after 200ms;") {
		t.Errorf("default timeout: %+v", r)
	}
}

// TestBashCancelKillsEverything starts children and grandchildren, some of
// them detached from bash in subshells, cancels, and checks that Run
// returns and that not one of those processes is left. They sleep far
// longer than the test waits for anything, so that only the kill ends them.
func TestBashCancelKillsEverything(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	env := Env{Cwd: dir}
	// $$ is the shell itself; every background job records its pid.
	command := `echo $$ > pids
sleep 1000 & echo $! >> pids
(sleep 1000 & echo $! >> pids)
bash -c 'sleep 1000 & echo $! >> pids; sleep 1000' & echo $! >> pids
( (sleep 1000 & echo $! >> pids; wait) & echo $! >> pids )
echo ready
touch ready
sleep 1000`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Result, 1)
	c, err := Prepare(env, "bash", bashCall(command))
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- Run(ctx, env, c) }()

	recorded := waitForLines(t, pids, 7)
	pgid := recorded[0]
	// "ready" is in the output once this file exists.
	for deadline := time.Now().Add(testwait.Hang); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never got ready")
		}
	}
	cancel()
	start := time.Now()
	var r Result
	select {
	case r = <-done:
	case <-time.After(testwait.Hang):
		t.Fatalf("Run did not return within %v of the cancel", testwait.Hang)
	}
	t.Logf("Run returned %v after the cancel", time.Since(start))
	if !r.Failed || !strings.HasSuffix(r.Output, "[cancelled]") || !strings.Contains(r.Output, "ready\n") {
		t.Errorf("got %+v", r)
	}
	// Run waits a bounded time for the killed members to be gone; on a
	// loaded machine one may still be on its way out, so the test waits
	// for them, longer than any of them would live unkilled.
	if left := groupMembers(pgid); len(left) > 0 {
		t.Logf("members of group %d still on their way out when Run returned: %v", pgid, left)
	}
	for _, pid := range recorded {
		waitDead(t, pid, "a process of the cancelled command")
	}
	for deadline := time.Now().Add(testwait.Hang); len(groupMembers(pgid)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("processes of group %d survived the cancel: %v", pgid, groupMembers(pgid))
		}
	}
}

// TestBashDoesNotWaitForEscapedProcesses covers processes that hold the
// output pipe but are out of reach of the group kill (setsid): Run must
// still return, on exit as on cancel. The escaped process sleeps far longer
// than the test waits, so a Run that waited for it would hang.
func TestBashDoesNotWaitForEscapedProcesses(t *testing.T) {
	dir := t.TempDir()
	env := Env{Cwd: dir}
	t.Run("exit", func(t *testing.T) {
		start := time.Now()
		r := runBashBounded(t, context.Background(), env, bashCall("setsid sleep 1000 & echo $! > escaped; echo bye"))
		t.Logf("Run took %v", time.Since(start))
		killRecorded(t, filepath.Join(dir, "escaped"))
		if r.Failed || r.Output != "bye\n[exit code: 0]" {
			t.Errorf("got %+v", r)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The cancel comes once the escaped process exists, however long
		// the machine takes to get there.
		go func() {
			defer cancel()
			for ctx.Err() == nil {
				if b, _ := os.ReadFile(filepath.Join(dir, "escaped2")); len(strings.Fields(string(b))) > 0 {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		start := time.Now()
		r := runBashBounded(t, ctx, env, bashCall("setsid sleep 1000 & echo $! > escaped2; sleep 1000"))
		t.Logf("Run took %v", time.Since(start))
		killRecorded(t, filepath.Join(dir, "escaped2"))
		if !r.Failed || r.Output != "[cancelled]" {
			t.Errorf("got %+v", r)
		}
	})
}

// runBashBounded is runBash with a bound on a hang: Run must return, and
// if it waits for a process that never ends the test says so.
func runBashBounded(t *testing.T, ctx context.Context, env Env, args string) Result {
	t.Helper()
	c, err := Prepare(env, "bash", args)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	done := make(chan Result, 1)
	go func() { done <- Run(ctx, env, c) }()
	select {
	case r := <-done:
		return r
	case <-time.After(testwait.Hang):
		t.Fatalf("Run did not return within %v", testwait.Hang)
		return Result{}
	}
}

// TestBashBackgroundJobOutlivesCommand documents the shell semantics kept
// on a normal exit: a job sent to the background is not killed.
func TestBashBackgroundJobOutlivesCommand(t *testing.T) {
	dir := t.TempDir()
	env := Env{Cwd: dir}
	r := runBash(t, context.Background(), env, bashCall("sleep 30 > /dev/null 2>&1 & echo $! > bg; echo started"))
	if r.Failed || r.Output != "started\n[exit code: 0]" {
		t.Errorf("got %+v", r)
	}
	pid := waitForLines(t, filepath.Join(dir, "bg"), 1)[0]
	if !alive(pid) {
		t.Error("the background job was killed")
	}
	killRecorded(t, filepath.Join(dir, "bg"))
}

// TestBashReadsOutputLeftInThePipe: once bash is reaped, what is still in
// the pipe is read at once, and a writer that still holds the pipe gets
// the grace period to finish: its late line is kept, after the rest.
//
// The late writer waits on a FIFO that bash opens and closes as its last
// act, so that its line comes after everything bash printed however the
// machine schedules them (a fixed sleep let it overtake the burst under
// load). The grace period is a time limit: whether the late line makes it
// depends on how soon the writer is scheduled, so every run must give one
// of the two whole outputs, and the test runs it again until the late line
// has made it once, which a loaded machine does within a few tries and code
// with no grace period never does.
func TestBashReadsOutputLeftInThePipe(t *testing.T) {
	env := Env{Cwd: t.TempDir(), Output: Output{Budget: MaxOutputBytes}}
	burst := strings.Repeat("x", 100000) + "\nearly\n"
	if err := syscall.Mkfifo(filepath.Join(env.Cwd, "done"), 0o600); err != nil {
		t.Fatal(err)
	}
	for try, deadline := 1, time.Now().Add(testwait.Hang); ; try++ {
		r := runBashBounded(t, context.Background(), env, bashCall(`(read -r _ < done; echo late) & head -c 100000 /dev/zero | tr '\0' x; echo; echo early; : > done`))
		switch r.Output {
		case burst + "late\n[exit code: 0]":
			t.Logf("the late line was kept on try %d", try)
			return
		case burst + "[exit code: 0]":
			// The writer missed the grace period this time.
		default:
			t.Fatalf("try %d: got %d bytes ending %q", try, len(r.Output), r.Output[max(0, len(r.Output)-40):])
		}
		if r.Failed {
			t.Fatalf("try %d: failed: %+v", try, r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the late line was never kept in %d tries over %v", try, testwait.Hang)
		}
	}
}

// TestBashOutputSizedToTheBudget: seq 1 300000 with a 4 KiB budget gives
// the model its first and last lines within the budget, a line naming the
// file that holds the whole output, and that file holds all of it.
func TestBashOutputSizedToTheBudget(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outputs")
	env := Env{Cwd: t.TempDir(), Output: Output{Budget: 4096, Dir: dir, Name: "call_7.out"}}
	r := runBash(t, context.Background(), env, bashCall(`seq 1 300000`))
	if r.Failed {
		t.Fatalf("failed: %.200s", r.Output)
	}
	exit := "[exit code: 0]"
	if len(r.Output) > 4096+len(exit) {
		t.Errorf("the model reads %d bytes, over the budget of 4096", len(r.Output))
	}
	if !strings.HasPrefix(r.Output, "1\n2\n3\n") || !strings.HasSuffix(r.Output, "299999\n300000\n"+exit) {
		t.Errorf("head or tail lost: %.40q … %q", r.Output, r.Output[len(r.Output)-40:])
	}
	file := filepath.Join(dir, "call_7.out")
	marker := regexp.MustCompile(`\n\[… ([0-9,]+) lines \(([0-9,]+) bytes\) left out of 300,000 lines \(1,988,895 bytes\) to fit the context window; the whole output is in ` + regexp.QuoteMeta(file) + `: search it with rg or grep, or read parts with read_file offset/limit\]\n`)
	m := marker.FindStringSubmatch(r.Output)
	if m == nil {
		t.Fatalf("no marker naming the file in %q", r.Output)
	}
	// Every line is whole: shown or counted as left out.
	head, tail, _ := strings.Cut(r.Output, m[0])
	shown := strings.Count(head, "\n") + 1 + strings.Count(strings.TrimSuffix(tail, exit), "\n")
	if left := strings.ReplaceAll(m[1], ",", ""); left != strconv.Itoa(300000-shown) {
		t.Errorf("%s lines said left out, %d shown of 300000", m[1], shown)
	}
	want, _ := exec.Command("seq", "1", "300000").Output()
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, want) {
		t.Errorf("the file holds %d bytes (%v), want the whole output, %d", len(got), err, len(want))
	}

	// An output of exactly the budget is not cut, and makes no file.
	r = runBash(t, context.Background(), Env{Cwd: t.TempDir(), Output: Output{Budget: 4096, Dir: filepath.Join(t.TempDir(), "none")}},
		bashCall(`head -c 4096 /dev/zero | tr '\0' b`))
	if strings.Contains(r.Output, "left out") || len(r.Output) != 4096+len("\n"+exit) {
		t.Errorf("output of exactly the budget was cut: %d bytes", len(r.Output))
	}
}

func TestBashConcurrentRuns(t *testing.T) {
	env := Env{Cwd: t.TempDir()}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Prepare(env, "bash", bashCall(fmt.Sprintf("echo %d", i)))
			if err != nil {
				t.Error(err)
				return
			}
			r := Run(context.Background(), env, c)
			if want := fmt.Sprintf("%d\n[exit code: 0]", i); r.Output != want {
				t.Errorf("got %q, want %q", r.Output, want)
			}
		}()
	}
	wg.Wait()
}

// waitForLines waits until the file holds n lines of pids and returns them.
func waitForLines(t *testing.T, p string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(p)
		fields := strings.Fields(string(b))
		if len(fields) >= n {
			var pids []int
			for _, f := range fields {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("bad pid %q in %s", f, p)
				}
				pids = append(pids, pid)
			}
			return pids
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not get %d lines", p, n)
	return nil
}

// killRecorded kills the processes whose pids a test command recorded, so
// that a test that lets a process escape does not leave it behind.
func killRecorded(t *testing.T, p string) {
	t.Helper()
	for _, pid := range waitForLines(t, p, 1) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// procStat reads a process's state and process group from /proc. A
// process that is gone, or a zombie (dead, waiting for a reaper that may
// be slow in a container), is reported as not alive.
func procStat(pid int) (state byte, pgid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// The command name is in parentheses and may hold spaces; the fields
	// after the last ")" are "state ppid pgrp …".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return 0, 0, false
	}
	pgid, err = strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pgid, true
}

func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// groupMembers lists the live processes of a process group.
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, g, ok := procStat(pid); ok && g == pgid && state != 'Z' && state != 'X' {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestStartedCallback: Started is called once, when the command's process
// exists, and not for a call that never runs.
func TestStartedCallback(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	env := Env{Cwd: dir, Started: func() { calls++ }}
	c, err := Prepare(env, "bash", `{"command":"touch marker"}`)
	if err != nil {
		t.Fatal(err)
	}
	Run(context.Background(), env, c)
	if calls != 1 {
		t.Errorf("Started called %d times", calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Run(ctx, env, c)
	if calls != 1 {
		t.Error("Started called for a call cancelled before it ran")
	}
}

// waitDead waits for a killed process to be gone, bounded by testwait.Hang:
// a process that was never killed outlives the bound, and the test says so.
func waitDead(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(testwait.Hang); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (%d) is still alive after %v", what, pid, testwait.Hang)
		}
	}
}
