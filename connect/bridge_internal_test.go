package connect

import (
	"encoding/json"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/jsonrpc"
)

// TestSessionsNoted: the sessions a reopen resumes are those the editor's
// requests opened and the server's answers confirmed (new and fork by the
// id in the answer, load and resume by the one asked), less those closed;
// a refused opening notes nothing.
func TestSessionsNoted(t *testing.T) {
	b := &bridge{}
	answer := func(method, params, result string) {
		p := json.RawMessage(params)
		in := jsonrpc.Incoming{Method: method, Session: jsonrpc.SessionOf(p), Tag: &request{opens: openingOf(p)}}
		var res json.RawMessage
		if result != "" {
			res = json.RawMessage(result)
		}
		b.noteAnswer(in, res)
	}
	answer(acp.AgentMethodSessionNew, `{"cwd":"/w","mcpServers":[]}`, `{"configOptions":[],"sessionId":"s1"}`)
	answer(acp.AgentMethodSessionLoad, `{"sessionId":"s2","cwd":"/w2","mcpServers":[{"name":"x"}]}`, `{}`)
	answer(acp.AgentMethodSessionLoad, `{"sessionId":"s3","cwd":"/w3","mcpServers":[]}`, "") // refused
	answer(acp.AgentMethodSessionNew, `{"cwd":"/w4","mcpServers":[]}`, `{"sessionId":"s4"}`)
	answer(acp.AgentMethodSessionClose, `{"sessionId":"s4"}`, `{}`)
	answer(acp.AgentMethodSessionFork, `{"sessionId":"s1","cwd":"/w5","mcpServers":[{"name":"y"}]}`, `{"sessionId":"s5"}`)
	if len(b.sessions) != 3 || string(b.sessions["s1"].cwd) != `"/w"` || string(b.sessions["s2"].servers) != `[{"name":"x"}]` {
		t.Errorf("sessions noted: %v", b.sessions)
	}
	if f := b.sessions["s5"]; string(f.cwd) != `"/w5"` || f.servers != nil {
		t.Errorf("a fork noted as %+v: its own cwd, and no servers (a resume sends [])", f)
	}
}
