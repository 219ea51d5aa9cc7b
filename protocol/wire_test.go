package protocol_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm/llmtest"
	"github.com/mm-agent/mm/logs"
)

// rawAgent is an in-process agent driven line by line, for what a well-
// behaved SDK client never sends.
type rawAgent struct {
	t     *testing.T
	log   *acptest.SyncBuffer
	in    *io.PipeWriter
	lines chan map[string]any
	done  chan struct{}
}

func newRawAgent(t *testing.T) (*rawAgent, *llmtest.Server) {
	return newRawAgentWith(t, script, nil)
}

// newRawAgentWith serves a script with a config edited by edit; the agent
// logs at debug level into r.log.
func newRawAgentWith(t *testing.T, script string, edit func(*configs.Config)) (*rawAgent, *llmtest.Server) {
	return newRawAgentOpts(t, script, edit, nil)
}

// newRawAgentOpts is newRawAgentWith with the connection's options edited
// by opts (other models, a state directory) before it starts.
func newRawAgentOpts(t *testing.T, script string, edit func(*configs.Config), opts func(*app.Options)) (*rawAgent, *llmtest.Server) {
	srv, model := scriptServer(t, script)
	cfg := configs.Default()
	cfg.Model.BaseURL = srv.URL()
	if edit != nil {
		edit(cfg)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	log := &acptest.SyncBuffer{}
	o := app.Options{Config: cfg, Model: model, In: inR, Out: outW, Log: logs.New(log, slog.LevelDebug)}
	if opts != nil {
		opts(&o)
	}
	c, err := app.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawAgent{t: t, log: log, in: inW, lines: make(chan map[string]any, 100), done: make(chan struct{})}
	go func() {
		c.Wait(context.Background())
		outW.Close()
		close(r.done)
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("stdout line is not JSON: %q", sc.Text())
				continue
			}
			r.lines <- m
		}
		close(r.lines)
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-r.done:
		case <-time.After(testwait.Hang):
			t.Error("agent did not stop")
		}
		for range r.lines {
		}
	})
	return r, srv
}

func (r *rawAgent) send(lines ...string) {
	if _, err := io.WriteString(r.in, strings.Join(lines, "\n")+"\n"); err != nil {
		r.t.Fatal(err)
	}
}

// response waits for the response with the given id, skipping notifications.
func (r *rawAgent) response(id float64) map[string]any {
	r.t.Helper()
	timeout := time.After(testwait.Hang)
	for {
		select {
		case m := <-r.lines:
			if got, ok := m["id"].(float64); ok && got == id {
				return m
			}
		case <-timeout:
			r.t.Fatalf("no response %v", id)
		}
	}
}

func (r *rawAgent) errorResponse() map[string]any {
	r.t.Helper()
	timeout := time.After(testwait.Hang)
	for {
		select {
		case m := <-r.lines:
			if _, ok := m["error"]; ok {
				return m
			}
		case <-timeout:
			r.t.Fatal("no error response")
		}
	}
}

func TestMalformedInput(t *testing.T) {
	r, _ := newRawAgent(t)
	for _, tc := range []struct {
		line string
		code float64
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"initialize",`, -32700},
		{`[1,2,3]`, -32600},
		{`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":42}}`, -32602},
		{`{"jsonrpc":"2.0","id":3,"method":"no/such/method","params":{}}`, -32601},
	} {
		r.send(tc.line)
		m := r.errorResponse()
		if got := m["error"].(map[string]any)["code"].(float64); got != tc.code {
			t.Errorf("%s: code %v, want %v", tc.line, got, tc.code)
		}
	}
	// Prompts are decoded by mm itself: the same errors as the SDK gives.
	for _, tc := range []struct{ line, want string }{
		{`{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"x","prompt":5}}`, "cannot unmarshal"},
		{`{"jsonrpc":"2.0","id":5,"method":"session/prompt","params":{"sessionId":"x"}}`, "prompt is required"},
		{`{"jsonrpc":"2.0","id":6,"method":"session/prompt","params":{"sessionId":"nope","prompt":[]}}`, "unknown session"},
		// A session's request naming none is bad params (issue 44: it
		// was -32002 unknown session "").
		{`{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"prompt":[]}}`, "sessionId is required"},
		{`{"jsonrpc":"2.0","id":8,"method":"session/set_mode","params":{"sessionId":"","modeId":"x"}}`, "sessionId is required"},
	} {
		r.send(tc.line)
		m := r.errorResponse()
		e := m["error"].(map[string]any)
		code := -32602.0
		if tc.want == "unknown session" {
			code = -32002 // ACP's resource_not_found
		}
		if e["code"].(float64) != code || !strings.Contains(fmt.Sprint(e["data"]), tc.want) || !strings.Contains(fmt.Sprint(e["message"]), tc.want) {
			t.Errorf("%s: %v, want code %v with %q, in the message too", tc.line, e, code, tc.want)
		}
	}
	// Still serving.
	r.send(`{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":1}}`)
	if m := r.response(9); m["result"] == nil {
		t.Errorf("initialize after bad input: %v", m)
	}
}

// TestCancelRightAfterPrompt sends a prompt and its cancel in one write: the
// cancel may reach the session before the prompt's turn does, and the turn
// must still be cancelled. An earlier, idle cancel must not
// cancel it.
func TestCancelRightAfterPrompt(t *testing.T) {
	r, srv := newRawAgent(t)
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	r.response(1)
	cwd := t.TempDir()
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, cwd))
	sid := r.response(2)["result"].(map[string]any)["sessionId"].(string)
	prompt := func(id int, text string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":%q}]}}`, id, sid, text)
	}
	cancel := fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":%q}}`, sid)
	// A prompt with an @mention is started on another goroutine (its file
	// is looked up), so its cancel can overtake it.
	if err := os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		id := 10 + 2*i
		text := "slow"
		if i%2 == 1 {
			text = "slow @notes.txt"
		}
		// An idle cancel first, then a prompt and its cancel back to back.
		r.send(cancel, prompt(id, text), cancel)
		if res := r.response(float64(id)); res["result"].(map[string]any)["stopReason"] != "cancelled" {
			t.Fatalf("round %d: %v", i, res)
		}
		r.send(prompt(id+1, "ping"))
		if res := r.response(float64(id + 1)); res["result"].(map[string]any)["stopReason"] != "end_turn" {
			t.Fatalf("round %d: prompt after cancels: %v", i, res)
		}
	}
	_ = srv
}

// TestTooManyPromptsSaysSo: a prompt refused because too many of its
// session's prompts wait says why in the error's message, which is what
// an editor shows (issue 44: the message was only "Invalid request").
func TestTooManyPromptsSaysSo(t *testing.T) {
	r, _ := newRawAgent(t)
	sid := r.initSession(t.TempDir())
	for i := range 70 {
		r.send(promptLine(100+i, sid, "slow"))
	}
	m := r.errorResponse()
	e := m["error"].(map[string]any)
	if e["code"].(float64) != -32600 || !strings.Contains(fmt.Sprint(e["message"]), "prompts of this session are waiting for their turn") {
		t.Errorf("the refused prompt's error: %v", m)
	}
	if d, _ := e["data"].(map[string]any); d["sessionId"] != sid || d["error"] != e["message"] {
		t.Errorf("the refused prompt's error data: %v", e["data"])
	}
	// The 65th is refused: 64 may wait (the session counts them as it
	// takes them, in its order).
	if m["id"].(float64) != 164 {
		t.Errorf("the first prompt refused is %v, want the 65th (164)", m["id"])
	}
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":%q}}`, sid))
}
