package protocol_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
)

// The tests of this file drive the edge with raw lines, the way a client
// that is not acp-go-sdk may write them, and check the faults the one
// ingress path fixed: order, escapes, any size, bursts, bad requests.

// initSession initialises the raw agent and opens a session in cwd.
func (r *rawAgent) initSession(cwd string) string {
	r.t.Helper()
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	r.response(1)
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, cwd))
	return r.response(2)["result"].(map[string]any)["sessionId"].(string)
}

func promptLine(id int, sid, text string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":%q}]}}`, id, sid, text)
}

// untilResponses reads lines until the responses with the given ids have
// come, and returns the texts of the agent_message_chunks read meanwhile,
// in order, with the responses by id.
func (r *rawAgent) untilResponses(ids ...float64) (chunks []string, responses map[float64]map[string]any) {
	r.t.Helper()
	chunks, _, responses = r.readResponses(ids)
	return chunks, responses
}

// inOrder reads lines until the responses with the given ids have come and
// returns their ids in the order they came, with the responses by id.
func (r *rawAgent) inOrder(ids ...float64) (order []float64, responses map[float64]map[string]any) {
	r.t.Helper()
	_, order, responses = r.readResponses(ids)
	return order, responses
}

// readResponses reads lines until the responses with the given ids have
// come: the agent_message_chunks' texts read meanwhile, the ids in the
// order their responses came, and the responses by id.
func (r *rawAgent) readResponses(ids []float64) (chunks []string, order []float64, responses map[float64]map[string]any) {
	r.t.Helper()
	responses = map[float64]map[string]any{}
	timeout := time.After(testwait.Hang)
	for len(responses) < len(ids) {
		select {
		case m, ok := <-r.lines:
			if !ok {
				r.t.Fatal("the agent closed its output")
			}
			if id, ok := m["id"].(float64); ok {
				if slices.Contains(ids, id) {
					order = append(order, id)
					responses[id] = m
				}
				continue
			}
			if p, ok := m["params"].(map[string]any); ok {
				if u, ok := p["update"].(map[string]any); ok && u["sessionUpdate"] == "agent_message_chunk" {
					chunks = append(chunks, u["content"].(map[string]any)["text"].(string))
				}
			}
		case <-timeout:
			r.t.Fatalf("responses %v: only %v came", ids, order)
		}
	}
	return chunks, order, responses
}

// TestPromptsRunInTheOrderSent: a prompt with an @mention (its file is
// looked up) and a plain one sent right after it in the same session run in
// the order sent, every time.
func TestPromptsRunInTheOrderSent(t *testing.T) {
	r, _ := newRawAgent(t)
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid := r.initSession(cwd)
	for i := 0; i < 30; i++ {
		a, b := float64(100+2*i), float64(101+2*i)
		r.send(promptLine(int(a), sid, fmt.Sprintf("first %d @notes.txt", i)), promptLine(int(b), sid, fmt.Sprintf("second %d", i)))
		chunks, _ := r.untilResponses(a, b)
		text := strings.Join(chunks, "")
		first, second := strings.Index(text, fmt.Sprintf("first %d", i)), strings.Index(text, fmt.Sprintf("second %d", i))
		if first < 0 || second < 0 || second < first {
			t.Fatalf("try %d: the plain prompt ran first: %q", i, text)
		}
	}
}

// TestEscapedCancel: "session\/cancel" is the same method as
// "session/cancel", and cancels the same way.
func TestEscapedCancel(t *testing.T) {
	r, _ := newRawAgent(t)
	sid := r.initSession(t.TempDir())
	r.send(promptLine(3, sid, "slow"), fmt.Sprintf(`{"jsonrpc":"2.0","method":"session\/cancel","params":{"sessionId":%q}}`, sid))
	if res := r.response(3); res["result"].(map[string]any)["stopReason"] != "cancelled" {
		t.Fatalf("the escaped cancel was ignored: %v", res)
	}
}

// TestCancelRequestCancelsAPrompt: $/cancel_request naming a prompt's
// request answers it as session/cancel would; a prompt queued behind it
// still runs.
func TestCancelRequestCancelsAPrompt(t *testing.T) {
	r, _ := newRawAgent(t)
	sid := r.initSession(t.TempDir())
	r.send(promptLine(3, sid, "slow"), promptLine(4, sid, "ping"), `{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}`)
	_, res := r.untilResponses(3, 4)
	if got := res[3]["result"].(map[string]any)["stopReason"]; got != "cancelled" {
		t.Errorf("cancelled request: %v", res[3])
	}
	if got := res[4]["result"].(map[string]any)["stopReason"]; got != "end_turn" {
		t.Errorf("the prompt after it: %v", res[4])
	}
}

// TestOversizedLines: a line of any size up to acp.maxLineBytes is read, a
// longer one gets an error naming the limit; neither stops mm.
func TestOversizedLines(t *testing.T) {
	testwait.Short(t, "lines of 12 and 17 MiB")
	big := strings.Replace(script, "rules:\n", "rules:\n  - match: \"^big \"\n    steps: [{text: \"a big one\"}]\n", 1)
	r, _ := newRawAgentWith(t, big, func(c *configs.Config) {
		c.ACP.MaxLineBytes = 16 << 20
		c.Prompt.MaxTextBytes = 16 << 20 // the line is on trial here, not the prompt's text
	})
	sid := r.initSession(t.TempDir())
	pad := strings.Repeat("x", 12<<20)
	// A 12 MiB request that the SDK frames: answered, with its id.
	r.send(`{"jsonrpc":"2.0","id":5,"method":"session/set_mode","params":{"sessionId":"` + sid + `","modeId":"ask","_meta":{"pad":"` + pad + `"}}}`)
	if m := r.response(5); m["error"] == nil && m["result"] == nil {
		t.Errorf("12 MiB request: %v", m)
	}
	// A 12 MiB notification: nothing to answer, nothing stops.
	r.send(`{"jsonrpc":"2.0","method":"_mm/unknown","params":{"pad":"` + pad + `"}}`)
	// A 12 MiB prompt is served.
	r.send(promptLine(6, sid, "big "+pad[:11<<20]))
	if m := r.response(6); m["result"] == nil {
		t.Errorf("12 MiB prompt: %v\n%s", m, r.log.String())
	}
	// Past the limit: an error that names it, then mm goes on.
	r.send(`{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"pad":"` + strings.Repeat("x", 17<<20) + `"}}`)
	m := r.errorResponse()
	if e := m["error"].(map[string]any); e["code"].(float64) != -32600 || !strings.Contains(fmt.Sprint(e["data"]), "acp.maxLineBytes") {
		t.Errorf("line over the limit: %v", e)
	}
	r.send(promptLine(8, sid, "ping"))
	if m := r.response(8); m["result"].(map[string]any)["stopReason"] != "end_turn" {
		t.Errorf("after the long lines: %v", m)
	}
}

// TestNotificationBurst: 5,000 notifications in one write neither close the
// connection nor fill stderr with errors.
func TestNotificationBurst(t *testing.T) {
	r, _ := newRawAgent(t)
	sid := r.initSession(t.TempDir())
	var b strings.Builder
	for i := 0; i < 5000; i++ {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, `{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":%q}}`+"\n", sid)
		case 1:
			b.WriteString(`{"jsonrpc":"2.0","method":"_mm/unknown","params":{}}` + "\n")
		default:
			b.WriteString(`{"jsonrpc":"2.0","method":"document/didChange","params":{"x":1}}` + "\n")
		}
	}
	r.send(strings.TrimSuffix(b.String(), "\n"))
	r.send(promptLine(9, sid, "ping"))
	if m := r.response(9); m["result"].(map[string]any)["stopReason"] != "end_turn" {
		t.Fatalf("after the burst: %v", m)
	}
	if n := strings.Count(r.log.String(), "ERROR"); n > 0 {
		t.Errorf("%d ERROR lines for the burst:\n%.2000s", n, r.log.String())
	}
}

// TestInvalidRequests: what is not a valid request gets the right JSON-RPC
// error, with its id when it has one.
func TestInvalidRequests(t *testing.T) {
	r, _ := newRawAgent(t)
	for _, tc := range []struct {
		line string
		code float64
		id   any
	}{
		{`{"jsonrpc":"2.0","id":10,"method":5}`, -32600, 10.0},
		{`{"jsonrpc":"2.0","id":"s","method":null,"params":{}}`, -32600, "s"},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}`, -32600, nil},
		{`{"jsonrpc":"2.0","id":11}`, -32600, 11.0},
		{`{"jsonrpc":"2.0","id":12,"method":"session/prompt","params":"nope"}`, -32602, 12.0},
		{`{"jsonrpc":"2.0","id":13,"method":"session/prompt","params":{"sessionId":"x","prompt":[{"type":"text","text":"hi"}]}}`, -32002, 13.0},
		{`"just a string"`, -32600, nil},
		{`{"jsonrpc":"2.0","id":14,"method":"session/new","params":[1]}`, -32602, 14.0},
	} {
		r.send(tc.line)
		m := r.errorResponse()
		if got := m["error"].(map[string]any)["code"].(float64); got != tc.code || fmt.Sprint(m["id"]) != fmt.Sprint(tc.id) {
			t.Errorf("%s: %v, want code %v and id %v", tc.line, m, tc.code, tc.id)
		}
	}
	r.send(`{"jsonrpc":"2.0","id":15,"method":"initialize","params":{"protocolVersion":1}}`)
	if m := r.response(15); m["result"] == nil {
		t.Errorf("initialize after bad input: %v", m)
	}
}

// TestPermissionWaitFreesTheSlot: with one turn slot, a turn waiting for
// the user's permission answer does not hold another session still.
func TestPermissionWaitFreesTheSlot(t *testing.T) {
	e := newToolEnv(t, func(c *configs.Config) { c.Yolo = false; c.Turns.Concurrency = 1 })
	otherDone := make(chan struct{})
	e.conn.Client.Permission = func(acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
		select { // the user thinks until the other session has answered
		case <-otherDone:
		case <-e.ctx.Done():
		}
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
			Selected: &acp.RequestPermissionOutcomeSelected{OptionId: "allow"},
		}}, nil
	}
	asking, other := e.newSession(), e.newSession()
	done := make(chan acp.PromptResponse, 1)
	go func() {
		res, _ := e.conn.Ask(e.ctx, asking, "write")
		done <- res
	}()
	waitFor(t, func() bool { return len(e.conn.Client.Permissions()) == 1 })
	// Were the other session held behind the permission, its ping would
	// wait until e.ctx ends: the user answers only once it has come back.
	res, err := e.conn.Ask(e.ctx, other, "ping")
	if err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the other session waited for the permission answer: %v %v", res, err)
	}
	close(otherDone)
	if r := <-done; r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the asking turn: %v", r)
	}
	if !fileExists(filepath.Join(e.cwd, "notes.txt")) {
		t.Error("the allowed write did not run")
	}
}

// TestCancelStormAnnouncesEveryCall: under cancels that land at every
// moment of a turn, every update about a tool call follows its tool_call.
func TestCancelStormAnnouncesEveryCall(t *testing.T) {
	testwait.Short(t, "400 turns cancelled at every moment")
	e := newToolEnv(t, nil)
	sid := e.newSession()
	for i := 0; i < 400; i++ {
		done := make(chan struct{})
		go func() {
			_, _ = e.conn.Ask(e.ctx, sid, "echo")
			close(done)
		}()
		if d := time.Duration(i%80) * 40 * time.Microsecond; d > 0 {
			time.Sleep(d)
		}
		_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid})
		<-done
	}
	announced := map[acp.ToolCallId]bool{}
	for _, u := range e.conn.Client.Updates(sid) {
		if u.ToolCall != nil {
			announced[u.ToolCall.ToolCallId] = true
		}
		if u.ToolCallUpdate != nil && !announced[u.ToolCallUpdate.ToolCallId] {
			t.Fatalf("an update for %s, whose tool_call was never sent", u.ToolCallUpdate.ToolCallId)
		}
	}
}

// TestSlowReaderBoundsMemory: while the client reads nothing, a session
// that streams pauses its model instead of piling its output up in memory;
// once the client reads again, the whole answer arrives.
func TestSlowReaderBoundsMemory(t *testing.T) {
	testwait.Short(t, "a 12 MiB answer held by a client that reads nothing")
	// Large words: langchaingo concatenates the answer chunk by chunk,
	// which costs the square of their number.
	word := strings.Repeat("w", 32<<10-1) + " "
	total := 12 << 20
	big := strings.Repeat(word, total/len(word))
	e := newEnvScript(t, "rules:\n  - match: \"^flood$\"\n    steps: [{text: \""+big+"\"}]\n", nil)
	sid := e.newSession()
	heapBefore := heapNow()
	e.conn.Pause()
	done := make(chan error, 1)
	go func() {
		res, err := e.conn.Ask(e.ctx, sid, "flood")
		if err == nil && res.StopReason != acp.StopReasonEndTurn {
			err = fmt.Errorf("stopReason %s", res.StopReason)
		}
		done <- err
	}()
	// Wait until the model server stops making progress (the stream is
	// held) or has sent everything (nothing held it).
	var sent int64
	for stable := 0; stable < 5 && sent < int64(total); {
		time.Sleep(100 * time.Millisecond)
		now := e.server.BytesSent()
		if now == sent && now > 0 {
			stable++
		} else {
			stable = 0
		}
		sent = now
	}
	held := heapNow() - heapBefore
	e.conn.Resume()
	t.Logf("the model server sent %d of %d bytes while the client read nothing; the heap grew by %d", sent, total, held)
	if held > 16<<20 {
		t.Errorf("the heap grew by %d bytes while the client read nothing", held)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := acptestText(e, sid); got != big {
		t.Fatalf("the client got %d bytes of %d", len(got), len(big))
	}
	// What the server could write meanwhile is what the agent's bound, the
	// pipe and the sockets held (the sockets' share depends on the kernel).
	if sent >= int64(total) {
		t.Errorf("the model server sent all %d bytes while the client read nothing", total)
	}
}

// heapNow is the live heap after a collection.
func heapNow() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func acptestText(e *env, sid acp.SessionId) string {
	var b bytes.Buffer
	for _, u := range e.conn.Client.Updates(sid) {
		if u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil {
			b.WriteString(u.AgentMessageChunk.Content.Text.Text)
		}
	}
	return b.String()
}
