package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/mm-agent/mm/internal/procs"
)

//go:embed bash.md
var bashDescription string

const bashSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "The command line, run with bash -c in the working directory."},
    "timeout": {"type": "number", "description": "Seconds before the command is killed. Defaults to the configured limit (10 minutes unless changed)."}
  },
  "required": ["command"],
  "additionalProperties": false
}`

// These grace periods bound how long Run waits once the command is over.
// Processes left in the background (or that escaped the process group) may
// hold the output pipe open forever, and Run must not wait on them.
const (
	// drainAfterExit is the wait for the pipe's end after bash exits by
	// itself: long enough for a writer that is just finishing, short
	// enough not to be felt.
	drainAfterExit = 100 * time.Millisecond
	// reapAfterKill bounds the wait, after the group was killed, for the
	// pipe's end and for the group's members to be dead. A killed process
	// dies as soon as the kernel schedules it, so this is normally a
	// matter of microseconds; the bound matters when a member is stuck in
	// an uninterruptible sleep (a hung NFS read), when a process that left
	// the group holds the pipe, or when /proc is missing.
	reapAfterKill = 500 * time.Millisecond
)

type bashTool struct{}

func (bashTool) Name() string            { return "bash" }
func (bashTool) Description() string     { return bashDescription }
func (bashTool) Schema() json.RawMessage { return json.RawMessage(bashSchema) }
func (bashTool) Kind() Kind              { return KindExecute }

func (bashTool) params() []param {
	return []param{
		{name: "command", typ: argString, required: true},
		{name: "timeout", typ: argNumber, min: 0.001},
	}
}

func (bashTool) prepare(env Env, c *Call) error {
	cmd := strings.TrimSpace(strArg(c.Args, "command"))
	if cmd == "" {
		return errors.New(`bash: argument "command" is empty; give the command line to run`)
	}
	c.Title = "bash: " + strArg(c.Args, "command")
	c.Mutating = true
	c.Named = commandPaths(env.Cwd, cmd)
	return nil
}

// bashEnd says how a command ended.
type bashEnd int

const (
	bashExited bashEnd = iota
	bashTimedOut
	bashCancelled
)

func (bashTool) run(ctx context.Context, env Env, c *Call) Result {
	command := strArg(c.Args, "command")
	timeout := env.BashTimeout
	if timeout <= 0 {
		timeout = DefaultBashTimeout
	}
	if secs, ok := numArg(c.Args, "timeout"); ok {
		// Durations past ~290 years overflow; such a timeout means "no
		// practical limit", which the cap keeps.
		if secs > 1e9 {
			secs = 1e9
		}
		timeout = time.Duration(secs * float64(time.Second))
	}

	// The output goes to a pipe that this function owns, rather than to an
	// io.Writer that os/exec would copy from: exec's Wait would then wait
	// for every holder of the pipe, including grandchildren left in the
	// background, and never return.
	pr, pw, err := os.Pipe()
	if err != nil {
		return Result{Output: fmt.Sprintf("[cannot run bash: %v]", err), Failed: true}
	}
	cmd := procs.Bash(command)
	cmd.Dir = env.Cwd
	if env.SessionID != "" {
		cmd.Env = append(os.Environ(), procs.SessionEnv(env.SessionID))
	}
	started := func() {}
	if env.Confine != nil {
		if started, err = env.Confine(cmd); err != nil {
			pr.Close()
			pw.Close()
			return Result{Output: fmt.Sprintf("[not run: %v]", err), Failed: true}
		}
	}
	cmd.Stdin = nil // os/exec connects a nil Stdin to /dev/null.
	cmd.Stdout = pw
	cmd.Stderr = pw
	// Its own group (a job object on Windows) lets a cancel kill the
	// command with every child and grandchild at once.
	group := procs.NewGroup(cmd)
	err = group.Start()
	started()
	if err != nil {
		pr.Close()
		pw.Close()
		if errors.Is(err, procs.ErrNoBash) {
			return Result{Output: "[" + err.Error() + "]", Failed: true}
		}
		return Result{Output: fmt.Sprintf("[cannot run bash in %s: %v]", env.Cwd, err), Failed: true}
	}
	// The parent's copy of the write end must go, or the pipe would never
	// reach end-of-file.
	pw.Close()
	defer group.Close()
	env.started()

	out := newHeadTail(MaxOutputBytes)
	var sink io.Writer = out
	if env.Progress != nil {
		live := &liveTail{}
		sink = io.MultiWriter(out, live)
		defer showLive(live, env.Progress)()
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		procs.CopyPipe(pr, sink)
	}()
	waitDone := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		procs.Done(cmd)
		waitDone <- err
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	end := bashExited
	var waitErr error
	select {
	case waitErr = <-waitDone:
	case <-ctx.Done():
		end = bashCancelled
		group.Kill()
		waitErr = <-waitDone
	case <-timer.C:
		end = bashTimedOut
		group.Kill()
		waitErr = <-waitDone
	}
	deadline := finishOutput(pr, out, readDone, end)
	if end != bashExited {
		// SIGKILL is delivered asynchronously: a member may still be on
		// its way out, its end of the pipe already closed, when bash is
		// reaped. Run returns once no member is alive (or the deadline
		// has passed), so that a caller that checks finds nothing left.
		group.WaitGone(deadline)
	}

	text := withNewline(out.String())
	switch end {
	case bashCancelled:
		return Result{Output: text + "[cancelled]", Failed: true}
	case bashTimedOut:
		return Result{Output: text + fmt.Sprintf("[timed out after %s; the command and its child processes were killed]", formatDuration(timeout)), Failed: true}
	}
	return Result{Output: text + exitLine(cmd.ProcessState, waitErr)}
}

// exitLine renders the last line of a bash output. It always carries an
// exit code; a death by signal uses the shell's 128+N convention and names
// the signal.
func exitLine(ps *os.ProcessState, waitErr error) string {
	if ps == nil {
		return fmt.Sprintf("[exit code: unknown (%v)]", waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("[exit code: %d (killed by signal: %v)]", 128+int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("[exit code: %d]", ps.ExitCode())
}

// withNewline ends a non-empty output with a newline.
func withNewline(text string) string {
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text
}

// finishOutput reads what is left in the pipe once bash is reaped, waiting
// for its end a grace period at most, whose end it returns.
func finishOutput(pr *os.File, out *headTail, readDone <-chan struct{}, end bashEnd) (deadline time.Time) {
	grace := drainAfterExit
	if end != bashExited {
		grace = reapAfterKill
	}
	deadline = time.Now().Add(grace)
	procs.FinishPipe(pr, out, readDone, deadline)
	return deadline
}
