package serve_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/serve"
)

// TestStatuses: the streamable HTTP transport answers as the TypeScript
// SDK's AcpServer does.
func TestStatuses(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.MaxMessageBytes = 4 << 10 })
	r := e.raw()
	ping := `{"jsonrpc":"2.0","id":7,"method":"session/list","params":{}}`
	// Before a connection exists.
	for _, c := range []struct {
		name, method, body string
		headers            []string
		status             int
		want               string
	}{
		{"not JSON", "POST", ping, []string{"Content-Type", "text/plain"}, 415, "Unsupported Media Type"},
		{"no content type", "POST", ping, []string{"Content-Type", ""}, 415, ""},
		{"json with charset", "POST", initialize, []string{"Content-Type", "application/json; charset=utf-8"}, 200, ""},
		{"bad JSON", "POST", `{"jsonrpc":`, nil, 400, "Invalid JSON"},
		{"a batch", "POST", `[` + ping + `]`, nil, 400, `"code":-32600`},
		{"not an object", "POST", `42`, nil, 400, "Invalid JSON-RPC message"},
		{"too long", "POST", `{"x":"` + strings.Repeat("a", 5<<10) + `"}`, nil, 413, "longer than serve.maxMessageBytes (4KiB)"},
		{"no connection", "POST", ping, nil, 400, "Missing Acp-Connection-Id"},
		{"unknown connection", "POST", ping, []string{"Acp-Connection-Id", "nope"}, 404, "Unknown Acp-Connection-Id"},
		// An unknown connection is refused before its body is read, an
		// initialize's too (an open connection's is refused below).
		{"initialize on an unknown connection", "POST", initialize, []string{"Acp-Connection-Id", "nope"}, 404, "Unknown Acp-Connection-Id"},
		{"initialize without an id", "POST", `{"jsonrpc":"2.0","id":null,"method":"initialize","params":{}}`, nil, 400, "Initialize request must include an ID"},
		{"GET without event-stream", "GET", "", []string{"Acp-Connection-Id", "nope"}, 406, "Not Acceptable"},
		{"GET without a connection", "GET", "", []string{"Accept", "text/event-stream"}, 400, "Missing Acp-Connection-Id"},
		{"GET an unknown connection", "GET", "", []string{"Accept", "text/event-stream", "Acp-Connection-Id", "nope"}, 404, ""},
		{"DELETE without a connection", "DELETE", "", nil, 400, "Missing Acp-Connection-Id"},
		{"DELETE an unknown connection", "DELETE", "", []string{"Acp-Connection-Id", "nope"}, 404, ""},
		{"another method", "PUT", "", nil, 405, ""},
	} {
		resp, body := r.do(c.method, c.body, c.headers...)
		if resp.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %q, want %d %q", c.name, resp.StatusCode, body, c.status, c.want)
		}
		if c.name == "a batch" && gjson.Get(body, "id").Type != gjson.Null {
			t.Errorf("a batch is answered with id %s, want null", gjson.Get(body, "id").Raw)
		}
	}

	// On a connection.
	r.init()
	r.post(initialize, http.StatusBadRequest) // a second initialize
	conn := r.stream("", http.StatusOK)
	r.stream("", http.StatusConflict) // one reader per stream
	r.post(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"`+t.TempDir()+`","mcpServers":[]}}`, http.StatusAccepted)
	sid := gjson.Get(conn.next(t, "id", "1"), "result.sessionId").String()
	if sid == "" {
		t.Fatal("no session")
	}
	prompt := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"ping"}]}}`, sid)
	for _, c := range []struct {
		name    string
		body    string
		headers []string
		status  int
		want    string
	}{
		{"a session's method without its header", prompt, nil, 400, "Missing Acp-Session-Id"},
		{"a session's method with another's", prompt, []string{"Acp-Session-Id", "other"}, 400, "Mismatched Acp-Session-Id"},
		{"a cancel without its header", `{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"` + sid + `"}}`, nil, 400, "Missing Acp-Session-Id"},
		{"a second initialize", initialize, nil, 400, "Initialize not allowed"},
		{"an id too long", `{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 1025) + `","method":"session/list","params":{}}`, nil, 400, "maxIdLength"},
		{"another token", `{"jsonrpc":"2.0","id":3,"method":"session/list","params":{}}`, []string{"Authorization", "Bearer " + token + "-bob"}, 404, ""},
	} {
		resp, body := r.do("POST", c.body, c.headers...)
		if resp.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %q, want %d %q", c.name, resp.StatusCode, body, c.status, c.want)
		}
	}
	session := r.stream(sid, http.StatusOK)
	r.stream(sid, http.StatusConflict)
	r.post(prompt, http.StatusAccepted, "Acp-Session-Id", sid)
	if m := session.next(t, "id", "2"); gjson.Get(m, "result.stopReason").String() != "end_turn" {
		t.Errorf("prompt answer %s", m)
	}
	// DELETE ends it: the streams end, and the id is unknown from then on.
	if resp, _ := r.do("DELETE", "", "Authorization", "Bearer "+token+"-bob"); resp.StatusCode != 404 {
		t.Errorf("DELETE by another token: %d", resp.StatusCode)
	}
	if resp, _ := r.do("DELETE", ""); resp.StatusCode != 202 {
		t.Errorf("DELETE: %d", resp.StatusCode)
	}
	if !conn.ended() || !session.ended() {
		t.Error("the streams outlived DELETE")
	}
	r.post(`{"jsonrpc":"2.0","id":4,"method":"session/list","params":{}}`, http.StatusNotFound)
	if resp, _ := r.do("DELETE", ""); resp.StatusCode != 404 {
		t.Errorf("second DELETE: %d", resp.StatusCode)
	}
}

// TestRouting: mm's output goes where the TypeScript SDK's server sends
// it: a session's updates, mm's requests of it and the answers to its
// requests on its stream, held until the client opens it; session/new's
// and session/load's answers on the connection's; a client's answer to a
// request of mm's must name the session the request came on.
func TestRouting(t *testing.T) {
	e := newEnv(t, func(_ *serve.Options, c *configs.Config) {
		c.Yolo = false
		c.Sessions.Enabled = true
	})
	r := e.raw()
	r.init()
	conn := r.stream("", http.StatusOK)
	cwd := t.TempDir()
	r.post(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"`+cwd+`","mcpServers":[]}}`, http.StatusAccepted)
	sid := gjson.Get(conn.next(t, "id", "1"), "result.sessionId").String()
	r.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"bash"}]}}`, sid),
		http.StatusAccepted, "Acp-Session-Id", sid)
	// The stream opens after the fact: what came for it was held.
	session := r.stream(sid, http.StatusOK)
	ask := session.next(t, "method", "session/request_permission")
	id := gjson.Get(ask, "id").Raw
	answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}`, id)
	r.post(answer, http.StatusBadRequest)                              // no session named
	r.post(answer, http.StatusBadRequest, "Acp-Session-Id", "someone") // another session
	r.post(answer, http.StatusAccepted, "Acp-Session-Id", sid)
	if m := session.next(t, "id", "2"); gjson.Get(m, "result.stopReason").String() != "end_turn" {
		t.Errorf("prompt answer %s", m)
	}
	if len(conn.msgs) != 0 {
		t.Errorf("the connection's stream got a session's message: %s", <-conn.msgs)
	}
	r.do("DELETE", "")

	// On a new connection, the load's replay comes before its answer, on
	// the connection's stream (TestLoadHistoryBeforeItsAnswer); the
	// session's stream, open, gets none of it.
	r2 := e.raw()
	r2.init()
	conn2 := r2.stream("", http.StatusOK)
	session2 := r2.stream(sid, http.StatusOK)
	r2.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":"load","method":"session/load","params":{"sessionId":%q,"cwd":%q,"mcpServers":[]}}`, sid, cwd),
		http.StatusAccepted, "Acp-Session-Id", sid)
	if m := conn2.next(t, "params.update.sessionUpdate", "user_message_chunk"); m == "" {
		t.Error("no replay on the connection's stream")
	}
	if m := conn2.next(t, "id", "load"); gjson.Get(m, "error").Exists() {
		t.Errorf("load: %s", m)
	}
	select {
	case m := <-session2.msgs:
		t.Errorf("the session's stream got %s during the load", m)
	default:
	}
}

// TestLoadHistoryBeforeItsAnswer: ACP wants a session/load's history
// (session/update notifications) before the load's response. Over
// streamable HTTP the response goes to the connection's stream; the
// history went to the session's, so a client that opens the session's
// stream once the load is answered, as the RFD's clients do, got the
// response first, and one that reads both streams could. Both now come
// on the connection's stream, the history first; the session's stream
// then serves the session as before.
func TestLoadHistoryBeforeItsAnswer(t *testing.T) {
	e := newEnv(t, func(_ *serve.Options, c *configs.Config) { c.Sessions.Enabled = true })
	r := e.raw()
	r.init()
	conn := r.stream("", http.StatusOK)
	cwd := t.TempDir()
	r.post(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"`+cwd+`","mcpServers":[]}}`, http.StatusAccepted)
	sid := gjson.Get(conn.next(t, "id", "1"), "result.sessionId").String()
	session := r.stream(sid, http.StatusOK)
	r.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"ping"}]}}`, sid),
		http.StatusAccepted, "Acp-Session-Id", sid)
	if m := session.next(t, "id", "2"); gjson.Get(m, "result.stopReason").String() != "end_turn" {
		t.Fatalf("prompt answer %s", m)
	}
	r.do("DELETE", "")

	// A client that opens the connection's stream only, and the session's
	// once the load is answered.
	r2 := e.raw()
	r2.init()
	conn2 := r2.stream("", http.StatusOK)
	r2.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":"load","method":"session/load","params":{"sessionId":%q,"cwd":%q,"mcpServers":[]}}`, sid, cwd),
		http.StatusAccepted, "Acp-Session-Id", sid)
	var before []string
	for answered := false; !answered; {
		select {
		case m, ok := <-conn2.msgs:
			if !ok {
				t.Fatal("the connection's stream ended before the load's answer")
			}
			if gjson.Get(m, "id").String() == "load" {
				if gjson.Get(m, "error").Exists() {
					t.Fatalf("load: %s", m)
				}
				answered = true
				continue
			}
			before = append(before, gjson.Get(m, "params.update.sessionUpdate").String()+": "+
				gjson.Get(m, "params.update.content.text").String())
		case <-time.After(testwait.Hang):
			t.Fatal("no answer to the load")
		}
	}
	t.Logf("before the load's answer: %q", before)
	history := strings.Join(before, "\n")
	if !strings.Contains(history, "user_message_chunk: ping") || !strings.Contains(history, "agent_message_chunk: pong") {
		t.Errorf("before the load's answer came %q, want the history: the prompt and its answer", before)
	}
	// The load answered, the session's stream carries the session again.
	session2 := r2.stream(sid, http.StatusOK)
	r2.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"ping"}]}}`, sid),
		http.StatusAccepted, "Acp-Session-Id", sid)
	if m := session2.next(t, "params.update.sessionUpdate", "agent_message_chunk"); m == "" {
		t.Error("no update of the new turn on the session's stream")
	}
	if m := session2.next(t, "id", "3"); gjson.Get(m, "result.stopReason").String() != "end_turn" {
		t.Errorf("prompt answer %s", m)
	}
}

// TestSessionStreamsBound: a connection whose unread session streams
// outnumber MaxBufferedSessionStreams ends.
func TestSessionStreamsBound(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.MaxBufferedSessionStreams = 1 })
	r := e.raw()
	r.init()
	conn := r.stream("", http.StatusOK)
	for i := 1; i <= 3; i++ {
		// Each new session sends its commands on a stream nobody reads.
		resp, _ := r.do("POST", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, i, t.TempDir()))
		if resp.StatusCode == http.StatusNotFound {
			break
		}
	}
	if !conn.ended() {
		t.Fatal("the connection outlived its bound")
	}
	waitFor(t, func() bool {
		return strings.Contains(e.stderr.String(), "closed: more session streams unread than maxBufferedSessionStreams")
	})
}

// TestAbandoned: a connection whose client never opens its stream ends
// after the stall timeout.
func TestAbandoned(t *testing.T) {
	testwait.Short(t, "a connection abandoned for the stall timeout")
	// The limit also bounds initialize's answer, inline, before it.
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.StallTimeout = stallBound })
	r := e.raw()
	r.init()
	waitFor(t, func() bool { return strings.Contains(e.stderr.String(), "no stream open for serve.stallTimeout") })
	r.post(`{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}}`, http.StatusNotFound)
}

// TestExactIDs: two requests in flight whose ids are integers a float64
// cannot tell apart (2^53 and 2^53+1) are two requests: each answer goes to
// its own session's stream. Keyed through a float64, the second request's
// route replaced the first's, and the first session's answer went to the
// other session's stream.
func TestExactIDs(t *testing.T) {
	e := newEnv(t, func(_ *serve.Options, c *configs.Config) { c.Yolo = false })
	r := e.raw()
	r.init()
	conn := r.stream("", http.StatusOK)
	ids := []string{"9007199254740992", "9007199254740993"}
	var sids []string
	for i := range ids {
		r.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, i+1, t.TempDir()), http.StatusAccepted)
		sids = append(sids, gjson.Get(conn.next(t, "id", fmt.Sprint(i+1)), "result.sessionId").String())
	}
	var streams []*sse
	var asks []string
	for i, sid := range sids {
		streams = append(streams, r.stream(sid, http.StatusOK))
		// The turn waits for its permission: both requests are in flight.
		r.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"bash"}]}}`, ids[i], sid),
			http.StatusAccepted, "Acp-Session-Id", sid)
		asks = append(asks, gjson.Get(streams[i].next(t, "method", "session/request_permission"), "id").Raw)
	}
	for i, sid := range sids {
		r.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}`, asks[i]),
			http.StatusAccepted, "Acp-Session-Id", sid)
		if m := streams[i].next(t, "id", ids[i]); gjson.Get(m, "result.stopReason").String() != "end_turn" {
			t.Errorf("session %d: prompt %s answered %s", i, ids[i], m)
		}
	}
}
