package protocol_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
)

// windowScript answers every turn briefly and cannot summarise.
const windowScript = `
rules:
  - match: "^Summarise the conversation"
    steps: [{error: "summariser down"}]
  - match: "turn"
    steps: [{text: "ok, noted."}]
usage: true
`

// TestWindowCapWhenCompactionFails: with a summariser that always fails,
// the history outgrows the window. Compression is tried less and less
// often, every request still fits the window (the server, like llama.cpp,
// refuses one that does not), the oldest turns are left out of the
// requests with a note and a marker, and the history itself keeps them.
func TestWindowCapWhenCompactionFails(t *testing.T) {
	const window, turns = 6000, 40
	e := newSessEnv(t, windowScript, func(c *configs.Config) {
		c.Model.ContextWindow = window
		c.Context.Threshold = 0.7
		c.Context.KeepLastTurns = 1
	})
	e.server.SetContextWindow(window)
	conn := e.agent()
	sid := e.newSession(conn)
	padding := strings.Repeat("words to fill the window ", 40) // 1,000 bytes
	for i := range turns {
		e.ask(conn, sid, fmt.Sprintf("turn %d %s", i, padding))
	}

	if n := e.server.Oversized(); n != 0 {
		t.Errorf("the server refused %d request(s) over its window", n)
	}
	if n := e.server.MaxPromptTokens(); n > window || n < window/2 {
		t.Errorf("largest request %d tokens, want at most the window (%d) and near it", n, window)
	}
	text := acptest.Text(conn.Client.Updates(sid))
	if !strings.Contains(text, "earlier message(s) left out of the request: the conversation no longer fits the model's context window (6000 tokens)") {
		t.Errorf("the user was not told that turns were left out:\n%.2000s", text)
	}
	msgs := e.server.LastRequest()["messages"].([]any)
	first, _ := msgs[1].(map[string]any)["content"].(string)
	if !strings.HasPrefix(first, "[") || !strings.Contains(first, "earlier messages of this conversation are left out of this request") ||
		!strings.Contains(first, "turn ") {
		t.Errorf("the first message after the system prompt is not a marked turn: %.300q", first)
	}
	if last, _ := msgs[len(msgs)-1].(map[string]any)["content"].(string); !strings.HasPrefix(last, fmt.Sprintf("turn %d ", turns-1)) {
		t.Errorf("the last message sent is not the question: %.100q", last)
	}

	// Tries back off: after N failures in a row, N turns pass untried.
	tries := strings.Count(conn.Stderr.String(), "auto-compact — [compact: failed")
	if tries < 3 || tries > 10 {
		t.Errorf("%d compression tries in %d turns, want a handful (backing off)", tries, turns)
	}
	if !strings.Contains(text, "summariser down; not tried again for 2 turn(s)]") {
		t.Errorf("the second failure does not say when the next try is:\n%.2000s", text)
	}
	// Nothing was deleted: the file holds every turn.
	if f := e.file(sid); len(f.History) != 1+2*turns {
		t.Errorf("the history holds %d messages, want %d", len(f.History), 1+2*turns)
	}
}

// TestPromptOverWindowRefused: a prompt that alone exceeds the window is
// refused with an internal error giving both sizes; it never reaches the
// server or the history, and the session goes on.
func TestPromptOverWindowRefused(t *testing.T) {
	e := newSessEnv(t, windowScript, func(c *configs.Config) { c.Model.ContextWindow = 8000 })
	conn := e.agent()
	sid := e.newSession(conn)
	e.ask(conn, sid, "turn one")
	before := e.server.Requests()

	huge := "turn two " + strings.Repeat("x", 40000) // about 10,000 tokens
	_, err := conn.Ask(e.ctx, sid, huge)
	if msg := internalError(t, err); !strings.Contains(msg, "about 10003 tokens") || !strings.Contains(msg, "context window is 8000 tokens") {
		t.Errorf("error %q does not give the prompt's size and the window's on one line", msg)
	}
	if e.server.Requests() != before {
		t.Error("the refused prompt reached the model server")
	}
	e.ask(conn, sid, "turn three")
	f := e.file(sid)
	if len(f.History) != 5 || f.History[3].Content != "turn three" {
		t.Errorf("history after the refusal: %d messages", len(f.History))
	}
}

// TestWindowTooSmallForTools: a window that cannot even hold the system
// prompt and the tool definitions is named as the cause, not the prompt.
func TestWindowTooSmallForTools(t *testing.T) {
	e := newSessEnv(t, windowScript, func(c *configs.Config) { c.Model.ContextWindow = 2048 })
	conn := e.agent()
	sid := e.newSession(conn)
	_, err := conn.Ask(e.ctx, sid, "turn one")
	if msg := internalError(t, err); !strings.Contains(msg, "context window of 2048 tokens is too small for mm: the system prompt and the tool definitions alone take about") {
		t.Errorf("error %q does not name the window as the cause", msg)
	}
	if e.server.Requests() != 0 {
		t.Error("a request that cannot fit reached the model server")
	}
}
