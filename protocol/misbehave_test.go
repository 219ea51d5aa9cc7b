package protocol_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
)

// misbehaveScript makes the model server stall or cut its stream.
const misbehaveScript = `
rules:
  - match: "^stall$"
    steps: [{text: "partial answer that never ends", stall: true}]
  - match: "^truncate$"
    steps: [{text: "half of a reply", truncate: true}]
  - match: "^ping$"
    steps: [{text: "pong"}]
usage: true
`

// thoughts is the text of a session's agent_thought_chunk updates.
func thoughts(updates []acp.SessionUpdate) string {
	s := ""
	for _, u := range updates {
		if u.AgentThoughtChunk != nil && u.AgentThoughtChunk.Content.Text != nil {
			s += u.AgentThoughtChunk.Content.Text.Text
		}
	}
	return s
}

// internalError returns the one-line error of a failed prompt.
func internalError(t *testing.T, err error) string {
	t.Helper()
	var re *acp.RequestError
	if !errors.As(err, &re) || re.Code != -32603 {
		t.Fatalf("err = %v, want internal error", err)
	}
	msg, _ := re.Data.(map[string]any)["error"].(string)
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q is not one line", msg)
	}
	return msg
}

// TestModelServerBusyRetried: refusals before any byte (503 twice, then
// 429 with Retry-After: 1) are retried; each wait is a thought the user
// sees, never part of the answer or the history.
func TestModelServerBusyRetried(t *testing.T) {
	e := newEnvScript(t, misbehaveScript, nil)
	sid := e.newSession()
	e.server.FailNext(2, 503, "")
	if res := e.ask(sid, "ping"); res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("stop reason %s", res.StopReason)
	}
	ups := e.conn.Client.Updates(sid)
	got := thoughts(ups)
	// The waits are 10 ms and 20 ms here, each plus up to half of it.
	if !regexp.MustCompile(`^model server busy \(HTTP 503\), retrying in 1\d ms \(retry 1 of 3\)\nmodel server busy \(HTTP 503\), retrying in [23]\d ms \(retry 2 of 3\)\n$`).MatchString(got) {
		t.Errorf("thoughts %q do not tell both waits", got)
	}
	if text := acptest.Text(ups); text != "pong" {
		t.Errorf("answer %q, want pong alone", text)
	}

	e.conn.Client.Reset()
	e.server.FailNext(1, 429, "1")
	start := time.Now()
	e.ask(sid, "ping")
	// The wait itself is TestCancelDuringRetryWait's: a time is logged.
	t.Logf("answered %v after a Retry-After: 1", time.Since(start))
	if got := thoughts(e.conn.Client.Updates(sid)); !strings.Contains(got, "model server busy (HTTP 429), retrying in 1 s (retry 1 of 3)") {
		t.Errorf("thoughts %q", got)
	}
	for _, m := range e.requestMessages() {
		if c, _ := m["content"].(string); strings.Contains(c, "retrying") {
			t.Errorf("a notice reached the history: %q", c)
		}
	}

	// Past the retries: the status, in one line; the session goes on.
	e.server.FailNext(4, 503, "")
	_, err := e.conn.Ask(e.ctx, sid, "ping")
	if msg := internalError(t, err); !strings.Contains(msg, "HTTP 503") || !strings.Contains(msg, "after 3 retries") {
		t.Errorf("error %q", msg)
	}
	e.ask(sid, "ping")
}

// TestCancelDuringRetryWait: a cancel ends a retry wait. The server
// refuses with Retry-After: 30 more times than the turn may retry
// (10 × 30 s, longer than testwait.Hang): the retries are honoured, and
// the cancel is the only way the turn ends before the hang bound.
func TestCancelDuringRetryWait(t *testing.T) {
	e := newEnvScript(t, misbehaveScript, func(c *configs.Config) { c.Model.Retries = 10 })
	sid := e.newSession()
	e.server.FailNext(11, 503, "30")
	res, took := askThenCancel(e, sid, "ping", func(u acp.SessionUpdate) bool { return u.AgentThoughtChunk != nil })
	if res.StopReason != acp.StopReasonCancelled {
		t.Errorf("stop reason %s, want cancelled", res.StopReason)
	}
	if got := thoughts(e.conn.Client.Updates(sid)); !strings.HasPrefix(got, "model server busy (HTTP 503), retrying in 30 s (retry 1 of 10)") {
		t.Errorf("thoughts %q", got)
	}
	t.Logf("cancelled after %v", took)
	e.server.FailNext(0, 0, "") // the refusals left are not the next turn's
	e.ask(sid, "ping")
}

// idleBound is model.idleTimeout where a test puts it on trial: the stalled
// server never answers, so the limit is the only way out, and every normal
// silence of the scripted server (its first byte, a ping's whole answer)
// must fit in it on a loaded machine.
const idleBound = 5 * time.Second

// TestStalledModel: a stream that goes quiet ends after model.idleTimeout
// with a one-line error naming it; the partial answer is kept, the
// session goes on, and a cancel ends a stall at once too.
func TestStalledModel(t *testing.T) {
	testwait.Short(t, "a model that stalls for model.idleTimeout")
	e := newEnvScript(t, misbehaveScript, func(c *configs.Config) { c.Model.IdleTimeout = idleBound })
	sid := e.newSession()
	_, err := e.conn.Ask(e.ctx, sid, "stall")
	if msg := internalError(t, err); msg != "model server: no answer for 5s (model.idleTimeout)" {
		t.Errorf("error %q", msg)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); text != "partial" {
		t.Errorf("streamed %q before the stall, want %q", text, "partial")
	}
	e.ask(sid, "ping")
	msgs := e.requestMessages()
	if len(msgs) != 4 || msgs[1]["content"] != "stall" || msgs[2]["content"] != "partial" {
		t.Errorf("history after the stall: %v", msgs)
	}

	e.conn.Client.Reset()
	res, _ := askThenCancel(e, sid, "stall", func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil })
	if res.StopReason != acp.StopReasonCancelled {
		t.Errorf("stop reason %s, want cancelled", res.StopReason)
	}
}

// TestSlowEditorIsNotAStalledModel (issue 17): the model server sends a
// long answer at once while the editor reads nothing for longer than
// model.idleTimeout. The session's stream pauses on its budget meanwhile,
// and that pause is the editor's, not the model's silence: once the editor
// reads again, the turn ends end_turn with the whole answer.
func TestSlowEditorIsNotAStalledModel(t *testing.T) {
	testwait.Short(t, "an editor that reads nothing for twice model.idleTimeout")
	// Large words keep the chunks few (langchaingo concatenates the answer
	// chunk by chunk); four times the session's stream budget in all, so
	// the stream must wait on the editor.
	word := strings.Repeat("w", 32<<10-1) + " "
	answer := strings.Repeat(word, 32)
	script := "rules:\n  - match: \"^flood$\"\n    steps: [{text: \"" + answer + "\"}]\n"
	e := newEnvScript(t, script, func(c *configs.Config) { c.Model.IdleTimeout = idleBound })
	sid := e.newSession()
	e.conn.Pause()
	type result struct {
		res acp.PromptResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.conn.Ask(e.ctx, sid, "flood")
		done <- result{res, err}
	}()
	// The editor reads nothing for twice the idle timeout from the moment
	// the answer starts: the slow peer is the test's, and a slower machine
	// only makes its pause longer.
	waitFor(t, func() bool { return e.server.BytesSent() > 0 })
	time.Sleep(2 * idleBound)
	e.conn.Resume()
	r := <-done
	if r.err != nil {
		t.Fatalf("the turn failed while the editor was slow: %v", r.err)
	}
	if r.res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("stop reason %s, want end_turn", r.res.StopReason)
	}
	if got := acptest.Text(e.conn.Client.Updates(sid)); got != answer {
		t.Errorf("the client got %d bytes of the answer's %d", len(got), len(answer))
	}
}

// TestTruncatedStream: a stream that ends cleanly without its finish is an
// error, not end_turn; the half reply is kept.
func TestTruncatedStream(t *testing.T) {
	e := newEnvScript(t, misbehaveScript, nil)
	sid := e.newSession()
	_, err := e.conn.Ask(e.ctx, sid, "truncate")
	if msg := internalError(t, err); msg != "model server: the model server ended the stream early" {
		t.Errorf("error %q", msg)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); text != "half of a reply" {
		t.Errorf("streamed %q", text)
	}
	e.ask(sid, "ping")
	if msgs := e.requestMessages(); len(msgs) != 4 || msgs[2]["content"] != "half of a reply" {
		t.Errorf("history after the cut: %v", msgs)
	}
}

// askThenCancel sends prompt, cancels it once an update satisfies when,
// and returns its response and how long the cancel took to answer.
func askThenCancel(e *env, sid acp.SessionId, prompt string, when func(acp.SessionUpdate) bool) (acp.PromptResponse, time.Duration) {
	e.t.Helper()
	done := make(chan acp.PromptResponse, 1)
	go func() {
		res, _ := e.conn.Ask(e.ctx, sid, prompt)
		done <- res
	}()
	if err := e.conn.Client.WaitUpdate(e.ctx, sid, when); err != nil {
		e.t.Fatal(err)
	}
	start := time.Now()
	if err := e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid}); err != nil {
		e.t.Fatal(err)
	}
	select {
	case res := <-done:
		return res, time.Since(start)
	case <-time.After(testwait.Hang):
		e.t.Fatalf("the cancel of %q did not end the turn", prompt)
		return acp.PromptResponse{}, 0
	}
}
