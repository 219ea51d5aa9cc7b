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

	cmd := procs.Bash(command)
	cmd.Dir = env.Cwd
	if env.SessionID != "" {
		cmd.Env = append(os.Environ(), procs.SessionEnv(env.SessionID))
	}
	if env.Confine != nil {
		if err := env.Confine(cmd); err != nil {
			return Result{Output: fmt.Sprintf("[not run: %v]", err), Failed: true}
		}
	}
	out := newHeadTail(MaxOutputBytes)
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
