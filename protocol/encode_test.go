package protocol

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
)

// The fast encoder must produce what the SDK's encoder produces, as JSON.
func TestAppendUpdateMatchesSDK(t *testing.T) {
	for name, u := range map[string]acp.SessionUpdate{
		"chunk":      {AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock("héllo \"w\"\n\t\\ <b> \x01")}},
		"thought":    {AgentThoughtChunk: &acp.SessionUpdateAgentThoughtChunk{Content: acp.TextBlock("hmm")}},
		"usage":      {UsageUpdate: &acp.SessionUsageUpdate{Used: 12, Size: 4096}},
		"toolcall":   {ToolCall: &acp.SessionUpdateToolCall{ToolCallId: "call_1", Title: "bash: ls", Kind: acp.ToolKindExecute, Status: acp.ToolCallStatusPending}},
		"invalid":    {AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock("bad \xff byte")}},
		"user+meta":  {UserMessageChunk: &acp.SessionUpdateUserMessageChunk{Meta: map[string]any{"mm.sessionProvenance": map[string]any{"sessionId": "s1", "kind": "root"}}, Content: acp.TextBlock("q")}},
		"chunk+meta": {AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Meta: map[string]any{"k": 1}, Content: acp.TextBlock("a")}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := appendUpdate(nil, "s1", &u)
			if err != nil {
				t.Fatal(err)
			}
			params, _ := json.Marshal(acp.SessionNotification{SessionId: "s1", Update: u})
			want, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": json.RawMessage(params)})
			var a, b any
			if err := json.Unmarshal(got, &a); err != nil {
				t.Fatalf("not JSON: %s", got)
			}
			_ = json.Unmarshal(want, &b)
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if !bytes.Equal(ja, jb) || got[len(got)-1] != '\n' || bytes.Count(got, []byte("\n")) != 1 {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// TestMergeRun: adjacent chunks of a session fold into one, a later usage
// replaces an earlier one, and nothing crosses a reply.
func TestOutboxFolds(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	var out bytes.Buffer
	s := newShard()
	s.w, s.log, s.root = &out, slog.New(slog.DiscardHandler), sys.Root
	chunk := func(t string) outItem {
		return outItem{sessionID: "a", update: acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock(t)}}}
	}
	usage := func(n int) outItem {
		return outItem{sessionID: "a", update: acp.SessionUpdate{UsageUpdate: &acp.SessionUsageUpdate{Used: n}}}
	}
	fut := sys.Root.RequestFuture(sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {})), nil, -1)
	for _, it := range []outItem{chunk("one "), chunk("two "), chunk("three"), usage(1), usage(2),
		{sessionID: "a", to: fut.PID(), msg: "reply"}, chunk("four")} {
		s.push(it)
	}
	s.closed = true
	s.run()
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	if len(lines) != 3 || !bytes.Contains(lines[0], []byte(`"one two three"`)) ||
		!bytes.Contains(lines[1], []byte(`"used":2`)) || !bytes.Contains(lines[2], []byte(`"four"`)) {
		t.Errorf("written:\n%s", out.Bytes())
	}
	if res, err := fut.Result(); err != nil || res != "reply" {
		t.Errorf("reply: %v %v", res, err)
	}
}

// BenchmarkAppendUpdate is the fast path; BenchmarkAppendUpdateSDK what it
// replaced (the SDK marshals an update, unmarshals it into a map and
// marshals that).
func BenchmarkAppendUpdate(b *testing.B) {
	u := acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock("re: ping s12 t3 w1 w2 w3 w4 w5 w6 w7 w8")}}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = appendUpdate(buf[:0], "20260101-000000-00000000", &u)
	}
}

func BenchmarkAppendUpdateSDK(b *testing.B) {
	u := acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock("re: ping s12 t3 w1 w2 w3 w4 w5 w6 w7 w8")}}
	r, w := io.Pipe()
	defer w.Close()
	conn := acp.NewAgentSideConnection(nil, io.Discard, r)
	b.ReportAllocs()
	for b.Loop() {
		_ = conn.SessionUpdate(b.Context(), acp.SessionNotification{SessionId: "20260101-000000-00000000", Update: u})
	}
}

// BenchmarkWireInPrompt: the stdin filter taking a prompt line off the wire
// (decoded, numbered, handed over).
func BenchmarkWireInPrompt(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","id":42,"method":"session/prompt","params":{"sessionId":"20260101-000000-00000000","prompt":[{"type":"text","text":"ping s12 t3 please look at the failing test and fix it"}]}}` + "\n")
	w := &wireIn{seq: map[string]uint64{}, out: newWireOut(io.Discard), prompt: func(promptJob) {}}
	b.ReportAllocs()
	for b.Loop() {
		_ = w.filter(line)
	}
}

// The hand-encoded prompt response is the SDK's, as JSON.
func TestAppendPromptResultMatchesJSON(t *testing.T) {
	for _, r := range []acp.PromptResponse{
		{StopReason: acp.StopReasonEndTurn},
		{StopReason: acp.StopReasonCancelled, Usage: &acp.Usage{InputTokens: 3, OutputTokens: 4, TotalTokens: 7}},
		{StopReason: acp.StopReasonMaxTokens, Usage: &acp.Usage{InputTokens: 3, OutputTokens: 4, TotalTokens: 7, ThoughtTokens: acp.Ptr(2), CachedReadTokens: acp.Ptr(1), CachedWriteTokens: acp.Ptr(5)}},
	} {
		got := appendPromptResult(nil, json.RawMessage("17"), &r)
		res, _ := json.Marshal(r)
		want, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 17, "result": json.RawMessage(res)})
		var a, b any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("not JSON: %s", got)
		}
		_ = json.Unmarshal(want, &b)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}
