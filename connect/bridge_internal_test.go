package connect

import (
	"fmt"
	"testing"
)

// TestBridgeExactIDs: the bridge waits at end of input for every request
// it sent, each by its exact id. Keyed through a float64, requests 2^53 and
// 2^53+1 were one: the first answer marked both answered, and mm connect
// could exit before the second prompt's answer came down.
func TestBridgeExactIDs(t *testing.T) {
	b := &bridge{asked: map[string]request{}, drained: make(chan struct{})}
	b.track([]byte(`{"jsonrpc":"2.0","id":9007199254740992,"method":"session/prompt","params":{"sessionId":"a"}}`))
	b.track([]byte(`{"jsonrpc":"2.0","id":9007199254740993,"method":"session/prompt","params":{"sessionId":"b"}}`))
	if len(b.asked) != 2 {
		t.Fatalf("%d requests tracked, want 2: %v", len(b.asked), b.asked)
	}
	key, ok := responseID([]byte(`{"jsonrpc":"2.0","id":9007199254740992,"result":{"stopReason":"cancelled"}}`))
	if !ok {
		t.Fatal("the response's id was not read")
	}
	b.eof = true
	b.answered(key)
	if r, left := b.asked[key]; left || len(b.asked) != 1 {
		t.Fatalf("after one answer: %v (the answered one left: %v %q)", b.asked, left, r.sid)
	}
	select {
	case <-b.drained:
		t.Fatal("drained with the second prompt unanswered")
	default:
	}
	key, _ = responseID([]byte(`{"id":9007199254740993,"jsonrpc":"2.0","result":{}}`))
	b.answered(key)
	select {
	case <-b.drained:
	default:
		t.Fatalf("not drained once both were answered: %v", b.asked)
	}
}

// TestSessionsNoted: the sessions a reopen resumes are those the editor's
// requests opened and the server's answers confirmed (new and fork by the
// id in the answer, load and resume by the one asked), less those closed;
// a refused opening notes nothing.
func TestSessionsNoted(t *testing.T) {
	b := &bridge{asked: map[string]request{}, drained: make(chan struct{})}
	req := func(id int, method, params string) string {
		return b.track([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)))
	}
	answer := func(key, frame string) {
		b.noteAnswer(key, []byte(frame))
		b.answered(key)
	}
	answer(req(1, "session/new", `{"cwd":"/w","mcpServers":[]}`), `{"jsonrpc":"2.0","id":1,"result":{"configOptions":[],"sessionId":"s1"}}`)
	answer(req(2, "session/load", `{"sessionId":"s2","cwd":"/w2","mcpServers":[{"name":"x"}]}`), `{"jsonrpc":"2.0","id":2,"result":{}}`)
	answer(req(3, "session/load", `{"sessionId":"s3","cwd":"/w3","mcpServers":[]}`), `{"jsonrpc":"2.0","id":3,"error":{"code":-32002,"message":"unknown"}}`)
	answer(req(4, "session/new", `{"cwd":"/w4","mcpServers":[]}`), `{"jsonrpc":"2.0","id":4,"result":{"sessionId":"s4"}}`)
	answer(req(5, "session/close", `{"sessionId":"s4"}`), `{"jsonrpc":"2.0","id":5,"result":{}}`)
	if len(b.sessions) != 2 || string(b.sessions["s1"].cwd) != `"/w"` || string(b.sessions["s2"].servers) != `[{"name":"x"}]` {
		t.Errorf("sessions noted: %v", b.sessions)
	}
	if len(b.opening) != 0 || len(b.asked) != 0 {
		t.Errorf("left waiting: %v %v", b.opening, b.asked)
	}
}
