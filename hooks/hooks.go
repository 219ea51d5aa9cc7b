package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"time"
)

// DefaultTimeout is how long a hook may run when Runner.Timeout is not set.
const DefaultTimeout = 10 * time.Second

// noReason is the reason given for a deny that came without one, so that
// the user always reads something after "denied".
const noReason = "no reason given"

// Runner runs the configured hooks. A nil *Runner or one without lines does nothing (allows, keeps).
// It is safe for concurrent use.
//
// The lists are named PreToolCallLines and PostAskLines, not after the
// config keys, because Go does not allow a field and a method of the same
// name, and the methods PreToolCall and PostAsk are what callers use.
type Runner struct {
	PreToolCallLines []string      // preToolCall hook lines, run in order
	PostAskLines     []string      // postAsk hook lines, run in order
	Timeout          time.Duration // 0 means 10s
	Log              *slog.Logger  // nil means discard
}

// PreToolCallEvent is what a preToolCall hook reads, and how it runs.
type PreToolCallEvent struct {
	SessionID string
	Cwd       string
	Tool      string
	Input     map[string]any
	// Confine, when set, confines the hook's command as the session's
	// commands are (the session's sandbox): a hook runs in the tenant's
	// folder, where what the tenant wrote (git's per-repository config,
	// core.fsmonitor among it) would otherwise run as mm.
	Confine Confine
}

// PostAskEvent is what a postAsk hook reads, and how it runs.
type PostAskEvent struct {
	SessionID, Cwd, Agent, Question, Answer string
	// Confine is PreToolCallEvent's.
	Confine Confine
}

// Confine makes a hook's command ready to run confined; the caller calls
// started once the command has started (package sandbox's Wrap).
type Confine func(*exec.Cmd) (started func(), err error)

// preToolCallWire and postAskWire are the JSON objects the hooks read. They
// are separate from the event types so that the wire names are fixed here,
// in one place, and the Go names stay free to change.
type preToolCallWire struct {
	Event     string         `json:"event"`
	SessionID string         `json:"sessionId"`
	Cwd       string         `json:"cwd"`
	Tool      string         `json:"tool"`
	Input     map[string]any `json:"input"`
}

type postAskWire struct {
	Event     string `json:"event"`
	SessionID string `json:"sessionId"`
	Cwd       string `json:"cwd"`
	Agent     string `json:"agent"`
	Question  string `json:"question"`
	Answer    string `json:"answer"`
}

// PreToolCall runs the preToolCall hooks in order and reports whether one denied the call, and why.
//
// The first deny wins and the later lines are not run: they could not
// change the outcome, and running them would only delay the turn. A
// cancelled context stops the hooks and allows, because the turn is over
// and the caller will not run the tool anyway.
func (r *Runner) PreToolCall(ctx context.Context, e PreToolCallEvent) (denied bool, reason string) {
	if r == nil || len(r.PreToolCallLines) == 0 {
		return false, ""
	}
	input := e.Input
	if input == nil {
		// A hook reads "input" as an object; null would make every hook
		// guard against a case that means nothing.
		input = map[string]any{}
	}
	stdin, err := encode(preToolCallWire{Event: "preToolCall", SessionID: e.SessionID, Cwd: e.Cwd, Tool: e.Tool, Input: input})
	if err != nil {
		r.logger().Warn(fmt.Sprintf("🪝 preToolCall hook: cannot encode the event for %s: %v", oneLine(e.Tool), err))
		return false, ""
	}
	for _, line := range r.PreToolCallLines {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if ctx.Err() != nil {
			return false, ""
		}
		res := r.run(ctx, line, e.SessionID, e.Cwd, stdin, e.Confine)
		if res.cancelled {
			return false, ""
		}
		if res.failure != "" {
			r.warn("preToolCall", line, res.failure)
			continue
		}
		var obj map[string]json.RawMessage
		if len(res.output) == 0 || json.Unmarshal(res.output, &obj) != nil {
			// No output, or valid JSON that is not an object: the hook
			// has no opinion.
			continue
		}
		var decision string
		if json.Unmarshal(obj["decision"], &decision) != nil {
			continue
		}
		// Any spelling of "deny" denies: misreading a deny as an allow
		// would let through what the hook meant to stop.
		if !strings.EqualFold(strings.TrimSpace(decision), "deny") {
			continue
		}
		var why string
		_ = json.Unmarshal(obj["reason"], &why)
		if strings.TrimSpace(why) == "" {
			why = noReason
		}
		return true, why
	}
	return false, ""
}

// PostAsk runs the postAsk hooks in order; it returns the answer, replaced or not.
//
// Each hook reads the answer as the hooks before it left it, so that hooks
// compose like a pipeline. A cancelled context stops the hooks and returns
// the answer as it stands.
func (r *Runner) PostAsk(ctx context.Context, e PostAskEvent) string {
	answer := e.Answer
	if r == nil || len(r.PostAskLines) == 0 {
		return answer
	}
	for _, line := range r.PostAskLines {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if ctx.Err() != nil {
			return answer
		}
		stdin, err := encode(postAskWire{Event: "postAsk", SessionID: e.SessionID, Cwd: e.Cwd, Agent: e.Agent, Question: e.Question, Answer: answer})
		if err != nil {
			r.logger().Warn(fmt.Sprintf("🪝 postAsk hook: cannot encode the event: %v", err))
			return answer
		}
		res := r.run(ctx, line, e.SessionID, e.Cwd, stdin, e.Confine)
		if res.cancelled {
			return answer
		}
		if res.failure != "" {
			r.warn("postAsk", line, res.failure)
			continue
		}
		var obj map[string]json.RawMessage
		if len(res.output) == 0 || json.Unmarshal(res.output, &obj) != nil {
			continue
		}
		raw, ok := obj["answer"]
		if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			continue
		}
		var replaced string
		if json.Unmarshal(raw, &replaced) != nil {
			// The hook meant to replace the answer and got it wrong; the
			// user should hear of it, as of any other broken hook.
			r.warn("postAsk", line, "printed an answer that is not a string: "+excerpt(raw))
			continue
		}
		if replaced != answer {
			answer = replaced
			r.logger().Info(fmt.Sprintf("🪝 postAsk: %s replaced the answer", oneLine(line)))
		}
	}
	return answer
}

// Count is how many hook lines are configured (for the start-up banner).
// Blank lines are not counted: they are never run.
func (r *Runner) Count() int {
	if r == nil {
		return 0
	}
	n := 0
	for _, lines := range [][]string{r.PreToolCallLines, r.PostAskLines} {
		for _, line := range lines {
			if strings.TrimSpace(line) != "" {
				n++
			}
		}
	}
	return n
}

// timeout is the time one hook line may run.
func (r *Runner) timeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultTimeout
	}
	return r.Timeout
}

func (r *Runner) logger() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// warn reports a hook that failed, in the one-line form the user greps
// for: "🪝 <event> hook <line>: <what went wrong>".
func (r *Runner) warn(event, line, failure string) {
	r.logger().Warn(fmt.Sprintf("🪝 %s hook %s: %s", event, oneLine(line), failure))
}

// encode renders the event as the hooks read it: one JSON object and a
// newline. HTML escaping is off so that a hook matching on "<" or "&" in a
// command line finds them as they were written.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
