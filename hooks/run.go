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

// run runs one hook line with stdin as its input and waits for it, for the
// runner's timeout at most.
func (r *Runner) run(ctx context.Context, line, sessionID, cwd string, stdin []byte, confine Confine) result {
	if ctx.Err() != nil {
		return result{cancelled: true}
	}
	cmd := procs.Bash(line)
	cmd.Dir = cwd
	// The mark lets the session's end (procs.KillSession) find whatever
	// the hook leaves behind, wherever it moved.
	cmd.Env = append(os.Environ(), procs.SessionEnv(sessionID))
	// Confined as the session's commands are: the hook runs in the
	// tenant's folder, where git's config is the tenant's to write.
	if confine != nil {
		started, err := confine(cmd)
		if err != nil {
			return result{failure: "cannot confine it: " + err.Error()}
		}
		defer started()
	}
	stdout := &capped{}
	stderr := &capped{tail: true}
	timeout := r.timeout()
	if stdin == nil {
		stdin = []byte{} // the event, even empty, rather than /dev/null
	}
	end, err := procs.Run(ctx, cmd, procs.IO{Stdin: stdin, Stdout: stdout, Stderr: stderr, Timeout: timeout})
	if err != nil {
		return result{failure: "cannot start: " + err.Error()}
	}

	switch {
	case end.End == procs.Cancelled || ctx.Err() != nil:
		// The turn is over; whatever the hook said no longer matters,
		// and a cancel is not the hook's fault.
		return result{cancelled: true}
	case end.End == procs.TimedOut:
		return result{failure: "timed out after " + formatDuration(timeout)}
	case end.WaitErr != nil:
		return result{failure: exitFailure(end.State, end.WaitErr, stderr.bytes())}
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
