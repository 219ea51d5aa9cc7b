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

// bashArgs are bash's parameters.
type bashArgs struct {
	Command string  `json:"command" alias:"cmd" jsonschema:"The command line, run with bash -c in the working directory."`
	Timeout float64 `json:"timeout,omitempty" min:"0.001" jsonschema:"Seconds before the command is killed. Defaults to the configured limit (10 minutes unless changed)."`
}

var bashSpec = specFor[bashArgs]("bash")

type bashTool struct{}

func (bashTool) Name() string            { return "bash" }
func (bashTool) Description() string     { return bashDescription }
func (bashTool) Schema() json.RawMessage { return bashSpec.schemaCopy() }
func (bashTool) Kind() Kind              { return KindExecute }

func (bashTool) spec() *spec { return bashSpec }

func (bashTool) prepare(env Env, c *Call) error {
	a := argsOf[bashArgs](c)
	cmd := strings.TrimSpace(a.Command)
	if cmd == "" {
		return errors.New(`bash: argument "command" is empty; give the command line to run`)
	}
	c.Title = "bash: " + a.Command
	c.Mutating = true
	c.Named = commandPaths(env.Cwd, cmd)
	return nil
}

func (bashTool) run(ctx context.Context, env Env, c *Call) Result {
	a := argsOf[bashArgs](c)
	command := a.Command
	timeout := env.BashTimeout
	if timeout <= 0 {
		timeout = DefaultBashTimeout
	}
	if secs := a.Timeout; secs > 0 {
		// Durations past ~290 years overflow; such a timeout means "no
		// practical limit", which the cap keeps.
		if secs > 1e9 {
			secs = 1e9
		}
		timeout = time.Duration(secs * float64(time.Second))
	}

	cmd := procs.Bash(command)
	cmd.Dir = env.Cwd
	if env.SessionID != "" {
		cmd.Env = append(os.Environ(), procs.SessionEnv(env.SessionID))
	}
	started := func() {}
	if env.Confine != nil {
		var err error
		if started, err = env.Confine(cmd); err != nil {
			return Result{Output: fmt.Sprintf("[not run: %v]", err), Failed: true}
		}
	}
	// Once the command has started (or failed to), what its confinement
	// opened for the start goes; it stays until the command ends.
	defer started()
	out := newCapture(env.Output, commandHead)
	var sink io.Writer = out
	if env.Progress != nil {
		live := &liveTail{}
		sink = io.MultiWriter(out, live)
		defer showLive(live, env.Progress)()
	}
	end, err := procs.Run(ctx, cmd, procs.IO{Stdout: sink, Timeout: timeout, Started: env.started})
	if err != nil {
		if errors.Is(err, procs.ErrNoBash) {
			return Result{Output: "[" + err.Error() + "]", Failed: true}
		}
		return Result{Output: fmt.Sprintf("[cannot run bash in %s: %v]", env.Cwd, err), Failed: true}
	}

	text := withNewline(out.String())
	switch end.End {
	case procs.Cancelled:
		return Result{Output: text + "[cancelled]", Failed: true}
	case procs.TimedOut:
		return Result{Output: text + fmt.Sprintf("[timed out after %s; the command and its child processes were killed]", formatDuration(timeout)), Failed: true}
	}
	return Result{Output: text + exitLine(end.State, end.WaitErr)}
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
