package protocol

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/jsonrpc"
)

// TestOutboxWritesWhatTheSDKWrites: the outbox writes session updates
// itself (in order with the responses it writes); each line is the one
// acp-go-sdk's SessionUpdate would write.
func TestOutboxWritesWhatTheSDKWrites(t *testing.T) {
	for name, u := range map[string]acp.SessionUpdate{
		"chunk":      {AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock("héllo \"w\"\n\t\\ <b> \x01")}},
		"thought":    {AgentThoughtChunk: &acp.SessionUpdateAgentThoughtChunk{Content: acp.TextBlock("hmm")}},
		"chunk+id":   {AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock("hi"), MessageId: ptr("0b6f2c1e-4d3a-4f5e-8a9b-1c2d3e4f5a6b")}},
		"thought+id": {AgentThoughtChunk: &acp.SessionUpdateAgentThoughtChunk{Content: acp.TextBlock("hmm"), MessageId: ptr("0b6f2c1e-4d3a-4f5e-8a9b-1c2d3e4f5a6b")}},
		"usage":      {UsageUpdate: &acp.SessionUsageUpdate{Used: 12, Size: 4096}},
		"toolcall":   {ToolCall: &acp.SessionUpdateToolCall{ToolCallId: "call_1", Title: "bash: ls", Kind: acp.ToolKindExecute, Status: acp.ToolCallStatusPending}},
		"user+meta":  {UserMessageChunk: &acp.SessionUpdateUserMessageChunk{Meta: map[string]any{"mm.sessionProvenance": map[string]any{"sessionId": "s1", "kind": "root"}}, Content: acp.TextBlock("q")}},
	} {
		t.Run(name, func(t *testing.T) {
			var ours syncbuf.Buffer
			o := newOutbox(lineConn(&ours), slog.New(slog.DiscardHandler))
			o.Update("s1", u)
			o.closeWithin(5 * time.Second)

			var sdk syncbuf.Buffer
			r, w := io.Pipe()
			defer w.Close()
			conn := acp.NewAgentSideConnection(nil, &sdk, r)
			conn.SetLogger(slog.New(slog.DiscardHandler))
			if err := conn.SessionUpdate(context.Background(), acp.SessionNotification{SessionId: "s1", Update: u}); err != nil {
				t.Fatal(err)
			}
			if got, want := ours.Bytes(), sdk.Bytes(); !bytes.Equal(got, want) {
				t.Errorf("outbox %s\nSDK    %s", got, want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// lineConn is a connection that writes its lines to w and reads nothing.
func lineConn(w io.Writer) *jsonrpc.Conn {
	return jsonrpc.New(jsonrpc.Lines(strings.NewReader(""), 1<<20), jsonrpc.NewLineWriter(w), jsonrpc.Options{Max: 1})
}

// TestOutboxFolds: adjacent chunks of a session fold into one, a later
// usage replaces an earlier one, and nothing crosses a reply, nor a
// change of message id.
func TestOutboxFolds(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	var out syncbuf.Buffer
	o := newOutbox(lineConn(&out), slog.New(slog.DiscardHandler))
	s := o.shard("a")
	chunk := func(t string) outItem {
		return outItem{sessionID: "a", update: acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock(t)}}}
	}
	of := func(id, t string) outItem {
		return outItem{sessionID: "a", update: acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock(t), MessageId: ptr(id)}}}
	}
	usage := func(n int) outItem {
		return outItem{sessionID: "a", update: acp.SessionUpdate{UsageUpdate: &acp.SessionUsageUpdate{Used: n}}}
	}
	fut := sys.Root.RequestFuture(sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {})), nil, -1)
	// Queued before the shard may write, so that they form one batch.
	s.mu.Lock()
	s.items = append(s.items, chunk("one "), chunk("two "), chunk("three"), usage(1), usage(2),
		outItem{sessionID: "a", to: fut.PID(), msg: "reply"}, chunk("four"), of("m1", "five "), of("m1", "six"), of("m2", "seven"))
	s.mu.Unlock()
	o.setRoot(sys.Root)
	o.closeWithin(5 * time.Second)
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	if len(lines) != 5 || !bytes.Contains(lines[0], []byte(`"one two three"`)) ||
		!bytes.Contains(lines[1], []byte(`"used":2`)) || !bytes.Contains(lines[2], []byte(`"four"`)) ||
		!bytes.Contains(lines[3], []byte(`"five six","type":"text"},"messageId":"m1"`)) || !bytes.Contains(lines[4], []byte(`"seven","type":"text"},"messageId":"m2"`)) {
		t.Errorf("written:\n%s", out.Bytes())
	}
	if res, err := fut.Result(); err != nil || res != "reply" {
		t.Errorf("reply: %v %v", res, err)
	}
}

// BenchmarkDecodePrompt: a prompt's params decoded as the ingress does
// (text blocks straight into acp.ContentBlockText) and with the SDK's
// acp.PromptRequest (each block into a map, then into its variant).
func BenchmarkDecodePrompt(b *testing.B) {
	params := []byte(`{"sessionId":"20260101-000000-00000000","prompt":[{"type":"text","text":"ping s12 t3 please look at the failing test and fix it"}]}`)
	b.Run("ingress", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, rerr := decodePrompt(params); rerr != nil {
				b.Fatal("decode")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p promptRequest
			if decodeParams(params, &p) != nil {
				b.Fatal("decode")
			}
		}
	})
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p acp.PromptRequest
			if decodeParams(params, &p) != nil {
				b.Fatal("decode")
			}
		}
	})
}

// BenchmarkEncodeChunk: an answer chunk's notification encoded as the
// outbox does (fast.go), by encoding/json from the same shapes, and as
// the SDK's types do.
func BenchmarkEncodeChunk(b *testing.B) {
	u := acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock("re: ping s12 t3 w1 w2 w3 w4 w5 w6 w7 w8")}}
	b.Run("outbox", func(b *testing.B) {
		b.ReportAllocs()
		var data, scratch []byte
		for b.Loop() {
			n := notification("20260101-000000-00000000", &u).(sessionNotification)
			scratch, _ = n.appendJSON(scratch[:0])
			data = jsonrpc.AppendRequest(data[:0], jsonrpc.ID{}, acp.ClientMethodSessionUpdate, scratch, true)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = jsonrpc.EncodeRequest(jsonrpc.ID{}, acp.ClientMethodSessionUpdate, notification("20260101-000000-00000000", &u))
		}
	})
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = jsonrpc.EncodeRequest(jsonrpc.ID{}, acp.ClientMethodSessionUpdate, acp.SessionNotification{SessionId: "20260101-000000-00000000", Update: u})
		}
	})
}

// TestDecodePromptMatchesTheSDK: the ingress's decoding of prompt params
// gives what acp.PromptRequest's gives, errors included.
func TestDecodePromptMatchesTheSDK(t *testing.T) {
	for _, params := range []string{
		`{"sessionId":"s1","prompt":[{"type":"text","text":"hi \u00e9","annotations":{"priority":1},"_meta":{"k":1}}]}`,
		`{"sessionId":"s1","prompt":[{"type":"resource_link","uri":"file:///x","name":"x"},{"type":"text","text":"@x"}],"messageId":"m","_meta":{"a":[1]}}`,
		`{"sessionId":"s1","prompt":[{"type":"image","data":"AA==","mimeType":"image/png"}]}`,
		`{"sessionId":"s1","prompt":[]}`,
		`{"sessionId":"s1"}`,
		`{"sessionId":"s1","prompt":[{"type":"text","text":5}]}`,
		`{"sessionId":"s1","prompt":[{"type":"nope"}]}`,
		`{"sessionId":7,"prompt":[]}`,
		`"nope"`,
	} {
		if why := decodesAsTheSDK(params); why != "" {
			t.Error(why)
		}
	}
}

// decodesAsTheSDK says how the ingress's decoding of prompt params differs
// from acp.PromptRequest's, "" when it does not.
func decodesAsTheSDK(params string) string {
	var ours acp.PromptRequest
	var e1 *acp.RequestError
	if json.Valid([]byte(params)) {
		// What the ingress reads: a line jsonrpc.Parse checked.
		var p any
		if p, e1 = decodePrompt([]byte(params)); e1 == nil {
			ours = p.(acp.PromptRequest)
		}
	} else {
		var p promptRequest
		e1 = decodeParams([]byte(params), &p)
		ours = p.request()
	}
	var sdk acp.PromptRequest
	e2 := decodeParams([]byte(params), &sdk)
	if (e1 == nil) != (e2 == nil) {
		return fmt.Sprintf("%q: ours %v, the SDK's %v", params, e1, e2)
	}
	if e1 != nil {
		return ""
	}
	if _, fast := fastPrompt([]byte(params)); fast && json.Valid([]byte(params)) && !reflect.DeepEqual(ours, sdk) {
		return fmt.Sprintf("%q: read in one walk as %#v, by the SDK as %#v", params, ours, sdk)
	}
	a, _ := json.Marshal(ours)
	b, _ := json.Marshal(sdk)
	if string(a) != string(b) {
		return fmt.Sprintf("%q:\nours %s\nsdk  %s", params, a, b)
	}
	return ""
}

// FuzzDecodePrompt: for any params, the ingress's decoding (its one-walk
// read of plain text blocks included) gives what acp.PromptRequest's
// gives, or fails where it fails.
func FuzzDecodePrompt(f *testing.F) {
	for _, s := range []string{
		`{"sessionId":"s1","prompt":[{"type":"text","text":"hi"}]}`,
		`{"sessionId":"s1","prompt":[{"type":"text","text":"a\nb\"c\\d\/e\tf"}]}`,
		`{"sessionId":"s1","prompt":[{"type":"text","text":"\ud83d\ude00 \ud800x"}]}`,
		`{"sessionId":"s1","prompt":[{"text":"x","type":"text"},{"type":"text","text":"y","type":"image"}]}`,
		`{"sessionId":"s1","prompt":[{"TYPE":"text","Text":"x"}]}`,
		`{"sessionId":"s1","prompt":[{"type":"te\u0078t","text":"x"}]}`,
		"{\"sessionId\":\"s1\",\"prompt\":[{\"type\":\"text\",\"text\":\"\xff\xfe\"}]}",
		`{"sessionId":"s1","prompt":[{"type":"text","text":null}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, params string) {
		if why := decodesAsTheSDK(params); why != "" {
			t.Fatal(why)
		}
	})
}

// TestFastPromptIsDecode: the one-walk read of a prompt's params
// (fastPrompt) gives what the SDK's decoding gives, to the field, on
// seeds of every shape it takes or leaves, and on 30,000 of their
// mutations that are JSON still; what it leaves is decoded as before.
func TestFastPromptIsDecode(t *testing.T) {
	seeds := []string{
		`{"sessionId":"s1","prompt":[{"type":"text","text":"hi"}]}`,
		` { "prompt" : [ { "text" : "a b" , "type" : "text" } , {"type":"text","text":""} ] , "sessionId" : "20260101-000000-0000beef" } `,
		`{"sessionId":"s1","prompt":[]}`,
		`{"sessionId":"s1","prompt":[{"type":"text","text":"a\nb\"c\\d\/e\tf <&> é 日本"}]}`,
		`{"sessionId":"s\u0031","prompt":[{"type":"text","text":"x"}]}`,
		`{"sessionId":"s1","sessionId":"s2","prompt":[{"type":"text","text":"x"}]}`,
		`{"SessionId":"s1","prompt":[{"type":"text","text":"x"}]}`,
		`{"sessionId":"s1","Prompt":[{"type":"text","text":"x"}]}`,
		`{"sessionId":"s1","prompt":[{"type":"text","text":"x"}],"prompt":[]}`,
		`{"sessionId":"s1","prompt":[{"type":"text","text":"x"}],"messageId":"m"}`,
		`{"sessionId":"s1","prompt":[{"type":"text","text":"x"}],"_meta":{"a":1}}`,
		`{"sessionId":"s1","prompt":[{"type":"text","text":"x","annotations":{"priority":1}}]}`,
		`{"sessionId":"s1","prompt":[{"type":"image","data":"AA==","mimeType":"image/png"}]}`,
		`{"sessionId":"s1","prompt":[1,"x",null,[]]}`,
		`{"sessionId":"s1","prompt":null}`,
		`{"sessionId":null,"prompt":[]}`,
		`{"sessionId":7,"prompt":[]}`,
		`{"prompt":[{"type":"text","text":"x"}]}`,
		`{"sessionId":"s1"}`,
		`{}`, `[]`, `"x"`, `null`,
		"{\"sessionId\":\"s\xff\",\"prompt\":[]}",
		"{\"sessionId\":\"s1\",\"prompt\":[{\"type\":\"text\",\"text\":\"\xc3\"}]}",
	}
	for _, s := range seeds {
		if why := decodesAsTheSDK(s); why != "" {
			t.Error(why)
		}
	}
	tokens := []string{"{", "}", "[", "]", ",", ":", " ", `"`, `\\`, `\u00e9`, "é", "\xff", `"sessionId"`, `"prompt"`, `"type"`, `"text"`,
		`"SESSIONID"`, `"x"`, "1", "null", "true", `{"type":"text","text":"y"}`}
	r := rand.New(rand.NewPCG(5, 6))
	taken := 0
	for n := 0; n < 30000; {
		b := []byte(seeds[r.IntN(len(seeds))])
		for range 1 + r.IntN(3) {
			i := r.IntN(len(b) + 1)
			switch r.IntN(3) {
			case 0:
				b = append(b[:i:i], append([]byte(tokens[r.IntN(len(tokens))]), b[i:]...)...)
			case 1:
				if i < len(b) {
					b = append(b[:i:i], b[i+1:]...)
				}
			case 2:
				if i < len(b) {
					b[i] = tokens[r.IntN(len(tokens))][0]
				}
			}
		}
		if !json.Valid(b) {
			continue
		}
		n++
		if _, ok := fastPrompt(b); ok {
			taken++
		}
		if why := decodesAsTheSDK(string(b)); why != "" {
			t.Fatal(why)
		}
	}
	t.Logf("30,000 mutations: %d read in one walk", taken)
}
