package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mm-agent/mm/internal/procs"
)

const (
	// maxOutput caps what is kept of a hook's stdout and of its stderr. A
	// verdict is a few bytes of JSON; the cap keeps a runaway hook from
	// filling mm's memory. What comes past it is read and dropped, so that
	// the hook is not blocked on a full pipe until it times out.
	maxOutput = 64 << 10
	// excerptBytes is how much of a bad output a log line quotes: enough
	// to recognise it, not enough to flood the log.
	excerptBytes = 200
)

// These grace periods bound how long a run waits for the hook's pipes once
// the hook itself is over. Processes a hook left in the background may hold
// its stdout or stderr open forever, and the turn must not wait on them.
const (
	// drainAfterExit is the wait for the pipes' end after the hook exits
	// by itself: long enough for a writer that is just finishing, short
	// enough not to be felt.
	drainAfterExit = 100 * time.Millisecond
	// reapAfterKill bounds the wait, after the group was killed, for the
	// pipes' end and for the group's members to be dead. A killed process
	// dies as soon as the kernel schedules it; the bound matters only for
	// a member stuck in an uninterruptible sleep, or a process that left
	// the group and still holds a pipe.
	reapAfterKill = 500 * time.Millisecond
)

// result is how one hook line went.
type result struct {
	// output is the hook's stdout, trimmed; it is valid JSON or empty
	// whenever failure is empty.
	output []byte
	// failure, when not empty, says what went wrong, for the Warn line.
	failure string
	// cancelled says that the context ended the run; nothing is logged.
	cancelled bool
}

// end says how a hook's process ended.
type end int

const (
	exited end = iota
	timedOut
	cancelled
)

// run runs one hook line with stdin as its input and waits for it, for the
// runner's timeout at most.
func (r *Runner) run(ctx context.Context, line, sessionID, cwd string, stdin []byte, confine Confine) result {
	if ctx.Err() != nil {
		return result{cancelled: true}
	}
	// The pipes are made here, rather than handed to os/exec as readers and
	// writers that it would copy: exec's Wait would then wait for every
	// holder of the pipes, including grandchildren left in the background,
	// and never return.
	var ends [6]*os.File // stdin r/w, stdout r/w, stderr r/w
	for i := 0; i < len(ends); i += 2 {
		pr, pw, err := os.Pipe()
		if err != nil {
			closeAll(ends[:i])
			return result{failure: "cannot start: " + err.Error()}
		}
		ends[i], ends[i+1] = pr, pw
	}
	inR, inW, outR, outW, errR, errW := ends[0], ends[1], ends[2], ends[3], ends[4], ends[5]

	cmd := procs.Bash(line)
	cmd.Dir = cwd
	// The mark lets the session's end (procs.KillSession) find whatever
	// the hook leaves behind, wherever it moved.
	cmd.Env = append(os.Environ(), procs.SessionEnv(sessionID))
	started := func() {}
	if confine != nil {
		var err error
		if started, err = confine(cmd); err != nil {
			closeAll(ends[:])
			return result{failure: "cannot confine it: " + err.Error()}
		}
	}
	cmd.Stdin = inR
	cmd.Stdout = outW
	cmd.Stderr = errW
	// Its own group (a job object on Windows) lets a timeout or a cancel
	// kill the hook with every child and grandchild at once.
	group := procs.NewGroup(cmd)
	err := group.Start()
	started()
	if err != nil {
		closeAll(ends[:])
		return result{failure: "cannot start: " + err.Error()}
	}
	defer group.Close()
	// The parent's copies of the child's ends must go: otherwise the
	// output pipes would never reach their end, and a hook reading its
	// stdin to the end would wait forever.
	closeAll([]*os.File{inR, outW, errW})

	// The event is written from a goroutine: a large tool input does not
	// fit in the pipe, and a hook that never reads its stdin must not
	// block the run.
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		_, _ = inW.Write(stdin) // EPIPE when the hook does not read: fine
		inW.Close()
	}()
	stdout := &capped{}
	stderr := &capped{tail: true}
	outDone := make(chan struct{})
	errDone := make(chan struct{})
	go func() { defer close(outDone); procs.CopyPipe(outR, stdout) }()
	go func() { defer close(errDone); procs.CopyPipe(errR, stderr) }()
	waitDone := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		procs.Done(cmd)
		waitDone <- err
	}()

	timeout := r.timeout()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	how := exited
	var waitErr error
	select {
	case waitErr = <-waitDone:
	case <-ctx.Done():
		how = cancelled
		group.Kill()
		waitErr = <-waitDone
	case <-timer.C:
		how = timedOut
		group.Kill()
		waitErr = <-waitDone
	}

	// A write still pending is to a pipe that some leftover process holds
	// and does not read: give it up. Closing the pipe ends the write on
	// every system; Windows's pipes take no deadline.
	inW.Close()
	<-stdinDone
	grace := drainAfterExit
	if how != exited {
		grace = reapAfterKill
	}
	deadline := time.Now().Add(grace)
	procs.FinishPipe(outR, stdout, outDone, deadline)
	procs.FinishPipe(errR, stderr, errDone, deadline)
	if how != exited {
		// SIGKILL is delivered asynchronously: a member may still be on
		// its way out when the hook's shell is reaped. The run returns
		// once none is alive (or the deadline has passed), so that no
		// hook outlives the turn that timed it out or cancelled it.
		group.WaitGone(deadline)
	}

	switch {
	case how == cancelled || ctx.Err() != nil:
		// The turn is over; whatever the hook said no longer matters,
		// and a cancel is not the hook's fault.
		return result{cancelled: true}
	case how == timedOut:
		return result{failure: "timed out after " + formatDuration(timeout)}
	case waitErr != nil:
		return result{failure: exitFailure(cmd.ProcessState, waitErr, stderr.bytes())}
	case stdout.overflow:
		return result{failure: fmt.Sprintf("printed more than %d KiB", maxOutput>>10)}
	}
	out := bytes.TrimSpace(stdout.bytes())
	if len(out) > 0 && !json.Valid(out) {
		return result{failure: "printed invalid JSON: " + excerpt(out)}
	}
	return result{output: out}
}

// exitFailure says how a hook that did not exit with status 0 ended, with
// the last line of its stderr, which is where scripts say why.
func exitFailure(ps *os.ProcessState, waitErr error, stderr []byte) string {
	var msg string
	switch {
	case ps == nil:
		msg = "failed: " + waitErr.Error()
	default:
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			msg = "killed by signal: " + ws.Signal().String()
		} else {
			msg = "exited with status " + strconv.Itoa(ps.ExitCode())
		}
	}
	if last := lastLine(stderr); last != "" {
		msg += ": " + last
	}
	return msg
}

// lastLine returns the last non-blank line of b, shortened for a log line.
func lastLine(b []byte) string {
	b = bytes.TrimRightFunc(b, unicode.IsSpace)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return excerpt(bytes.TrimSpace(b))
}

// excerpt returns the first excerptBytes of b, cut on a character boundary
// and made printable on one line.
func excerpt(b []byte) string {
	if len(b) > excerptBytes {
		cut := excerptBytes
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		b = b[:cut]
	}
	return oneLine(string(b))
}

// oneLine makes s safe to put in a log message: mm's log handler writes
// messages as they are, and a newline or a terminal escape in a hook's
// output or in a multi-line hook would break the "one record a line" rule
// that people grep by. Control characters are written as Go escapes;
// ordinary text is left untouched.
func oneLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, c := range s {
		if unicode.IsControl(c) {
			q := strconv.QuoteRune(c)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// formatDuration writes whole seconds as "10s" rather than Go's "10s" for
// some and "1m0s" for others, and anything else as Go does.
func formatDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// capped keeps at most maxOutput bytes of what is written to it: the first
// ones (stdout, whose beginning is the verdict) or, with tail, the last ones
// (stderr, whose end says why a hook failed). It is written by one goroutine
// and read after that goroutine is done.
type capped struct {
	tail     bool
	buf      []byte
	overflow bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	if !c.tail {
		room := maxOutput - len(c.buf)
		if len(p) > room {
			c.overflow = true
			p = p[:max(room, 0)]
		}
		c.buf = append(c.buf, p...)
		return n, nil
	}
	c.buf = append(c.buf, p...)
	// The tail is trimmed only once it is twice the cap, so that a hook
	// writing in small pieces does not cost a copy per write.
	if len(c.buf) > 2*maxOutput {
		c.overflow = true
		c.buf = append(c.buf[:0], c.buf[len(c.buf)-maxOutput:]...)
	}
	return n, nil
}

func (c *capped) bytes() []byte {
	if len(c.buf) > maxOutput {
		return c.buf[len(c.buf)-maxOutput:]
	}
	return c.buf
}
