package grains

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/coder/acp-go-sdk"
	"google.golang.org/protobuf/proto"

	"github.com/mm-agent/mm/grains/grainspb"
)

// TestPromptCrossesNodesAsSent: a prompt's params cross nodes as the
// client sent them, so that the session on another node decodes what a
// session on the client's node decodes: the prompt's _meta, a block's
// annotations and _meta included (issue 45: a restated schema dropped
// them; acp-go-sdk's types also write back less than they read).
func TestPromptCrossesNodesAsSent(t *testing.T) {
	const sid = "sess_1"
	raw := json.RawMessage(`{"sessionId":"sess_1","_meta":{"editor":"zed"},"prompt":[` +
		`{"type":"text","text":"hello","_meta":{"k":"v"},"annotations":{"audience":["user"],"priority":0.5}},` +
		`{"type":"resource_link","uri":"file:///a.go","name":"a.go","annotations":{"lastModified":"2026-12-05"}}]}`)
	var local acp.PromptRequest // what a session on the client's node gets
	if err := json.Unmarshal(raw, &local); err != nil {
		t.Fatal(err)
	}
	call := &grainspb.Call{Method: acp.AgentMethodSessionPrompt, SessionId: sid}
	if _, err := encodeParams(call, call.Method, local, raw); err != nil {
		t.Fatal(err)
	}
	back := overTheWire(t, call)
	if string(back.Params) != string(raw) {
		t.Errorf("the params crossed as\n%s\nnot as sent\n%s", back.Params, raw)
	}
	got, err := decodeParams(back)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, local) {
		t.Errorf("the session across nodes got\n%#v\nthe one on the client's node\n%#v", got, local)
	}
	p := got.(acp.PromptRequest)
	if p.Meta["editor"] != "zed" || p.Prompt[0].Text == nil || p.Prompt[0].Text.Annotations == nil || p.Prompt[0].Text.Meta["k"] != "v" ||
		p.Prompt[1].ResourceLink == nil || p.Prompt[1].ResourceLink.Annotations == nil {
		t.Errorf("the prompt's _meta or a block's annotations or _meta did not cross: %#v", p)
	}
}

// TestCallsCrossNodesAsSent: every request a session's node serves comes
// out of its Call as the SDK's value the edge decoded, over the wire's
// bytes, for every method that crosses.
func TestCallsCrossNodesAsSent(t *testing.T) {
	const sid = "sess_1"
	servers := []acp.McpServer{
		{Stdio: &acp.McpServerStdio{Name: "fs", Command: "/bin/mcp", Args: []string{"-v"}, Env: []acp.EnvVariable{{Name: "K", Value: "V"}}}},
		{Http: &acp.McpServerHttpInline{Name: "web", Type: "http", Url: "http://127.0.0.1:1/mcp", Headers: []acp.HttpHeader{{Name: "A", Value: "B"}}}},
	}
	forkServers := []acp.UnstableMcpServer{{Stdio: &acp.McpServerStdio{Name: "fs", Command: "/bin/mcp", Args: []string{}, Env: []acp.EnvVariable{}}}}
	mime := "text/x-go"
	size := 42
	cases := []struct {
		method string
		p      any
	}{
		{acp.AgentMethodSessionPrompt, acp.PromptRequest{SessionId: sid, MessageId: new("m-1"), Meta: map[string]any{"editor": "zed", "trace": "t-1"}, Prompt: []acp.ContentBlock{
			{Text: &acp.ContentBlockText{Type: "text", Text: "hello, 世界"}},
			{Image: &acp.ContentBlockImage{Type: "image", Data: "iVBO", MimeType: "image/png", Uri: new("file:///a.png")}},
			{Audio: &acp.ContentBlockAudio{Type: "audio", Data: "UklG", MimeType: "audio/wav"}},
			{ResourceLink: &acp.ContentBlockResourceLink{Type: "resource_link", Uri: "file:///a.go", Name: "a.go", MimeType: &mime, Size: &size, Title: new("A"), Description: new("the a")}},
			{Resource: &acp.ContentBlockResource{Type: "resource", Resource: acp.EmbeddedResourceResource{TextResourceContents: &acp.TextResourceContents{Uri: "file:///b.go", MimeType: &mime, Text: "package b"}}}},
			{Resource: &acp.ContentBlockResource{Type: "resource", Resource: acp.EmbeddedResourceResource{BlobResourceContents: &acp.BlobResourceContents{Uri: "file:///c.bin", Blob: "AAEC"}}}},
		}}},
		{acp.AgentMethodSessionPrompt, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{}}},
		{acp.AgentMethodSessionNew, acp.NewSessionRequest{Cwd: "/w", AdditionalDirectories: []string{"/x", "/y"}, McpServers: servers}},
		{acp.AgentMethodSessionNew, acp.NewSessionRequest{Cwd: "/w", McpServers: []acp.McpServer{}}},
		{acp.AgentMethodSessionLoad, acp.LoadSessionRequest{SessionId: sid, Cwd: "/w", McpServers: servers}},
		{acp.AgentMethodSessionResume, acp.ResumeSessionRequest{SessionId: sid, Cwd: "/w", AdditionalDirectories: []string{"/x"}}},
		{acp.AgentMethodSessionFork, acp.UnstableForkSessionRequest{SessionId: "sess_parent", Cwd: "/w", McpServers: forkServers}},
		{acp.AgentMethodSessionClose, acp.CloseSessionRequest{SessionId: sid}},
		{acp.AgentMethodSessionDelete, acp.UnstableDeleteSessionRequest{SessionId: sid}},
		{acp.AgentMethodSessionSetMode, acp.SetSessionModeRequest{SessionId: sid, ModeId: "plan"}},
		{acp.AgentMethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{SessionId: sid, ConfigId: "model", Value: "fast"}}},
		{acp.AgentMethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{Boolean: &acp.SetSessionConfigOptionBoolean{SessionId: sid, ConfigId: "net", Type: "boolean", Value: true}}},
	}
	for _, tc := range cases {
		call := &grainspb.Call{Method: tc.method, SessionId: sid}
		if _, err := encodeParams(call, tc.method, tc.p, nil); err != nil {
			t.Fatalf("%s: %v", tc.method, err)
		}
		got, err := decodeParams(overTheWire(t, call))
		if err != nil {
			t.Fatalf("%s: %v", tc.method, err)
		}
		if !reflect.DeepEqual(got, tc.p) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(tc.p)
			t.Errorf("%s came out as\n%s\nwant\n%s", tc.method, g, w)
		}
	}
}

// TestCallsFromAnotherNodeAreChecked: what a node cannot make into a
// request (a Call another node got wrong, or wrote to hurt) is refused
// with its reason, never served half read.
func TestCallsFromAnotherNodeAreChecked(t *testing.T) {
	for name, c := range map[string]*grainspb.Call{
		"an unknown method":           {Method: "session/nope", SessionId: "s"},
		"params that are not JSON":    {Method: acp.AgentMethodSessionPrompt, SessionId: "s", Params: []byte("{")},
		"a block of the wrong type":   {Method: acp.AgentMethodSessionPrompt, SessionId: "s", Params: []byte(`{"sessionId":"s","prompt":[{"type":"text","text":5}]}`)},
		"another session's params":    {Method: acp.AgentMethodSessionPrompt, SessionId: "s", Params: []byte(`{"sessionId":"t","prompt":[]}`)},
		"another session's, plain":    {Method: acp.AgentMethodSessionPrompt, SessionId: "s", Params: []byte(`{"sessionId":"t","prompt":[{"type":"text","text":"x"}]}`)},
		"a plain prompt cut short":    {Method: acp.AgentMethodSessionPrompt, SessionId: "s", Params: []byte(`{"sessionId":"s","prompt":[{"type":"text","text":"x"}]`)},
		"a plain prompt, then more":   {Method: acp.AgentMethodSessionPrompt, SessionId: "s", Params: []byte(`{"sessionId":"s","prompt":[{"type":"text","text":"x"}]} {}`)},
		"MCP servers that are not":    {Method: acp.AgentMethodSessionNew, SessionId: "s", Params: []byte(`{"cwd":"/w","mcpServers":{}}`)},
		"a method only a client gets": {Method: acp.ClientMethodSessionUpdate, SessionId: "s", Params: []byte(`{"sessionId":"s","update":{}}`)},
	} {
		if p, err := decodeParams(c); err == nil {
			t.Errorf("%s: taken as %#v", name, p)
		}
	}
}

// promptParams is a session/prompt's params of one text block, as an edge
// puts them in a Call.
func promptParams(sid, text string) []byte {
	return []byte(fmt.Sprintf(`{"sessionId":%q,"prompt":[{"type":"text","text":%q}]}`, sid, text))
}

// overTheWire is call as another node reads it: marshalled, then
// unmarshalled.
func overTheWire(t *testing.T, call *grainspb.Call) *grainspb.Call {
	t.Helper()
	wire, err := proto.Marshal(call)
	if err != nil {
		t.Fatal(err)
	}
	var back grainspb.Call
	if err := proto.Unmarshal(wire, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}

// TestPromptCallsDecodeAsTheSDK: a prompt's params from another node,
// read in one walk where they are plain (protocol.FastPrompt), are what
// the SDK's decoding makes of them, to the field.
func TestPromptCallsDecodeAsTheSDK(t *testing.T) {
	for _, params := range []string{
		`{"sessionId":"s","prompt":[{"type":"text","text":"hi <é> \n \"q\""}]}`,
		` { "prompt" : [ ] , "sessionId" : "s" } `,
		`{"sessionId":"s","prompt":[{"type":"text","text":"a"},{"text":"b","type":"text"}]}`,
		`{"sessionId":"s","prompt":[{"type":"text","text":"a","annotations":{"priority":1}}],"_meta":{"k":1}}`,
		`{"sessionId":"s","prompt":[{"type":"resource_link","uri":"file:///x","name":"x"}]}`,
	} {
		got, err := decodeParams(&grainspb.Call{Method: acp.AgentMethodSessionPrompt, SessionId: "s", Params: []byte(params)})
		if err != nil {
			t.Fatalf("%s: %v", params, err)
		}
		var want acp.PromptRequest
		if err := json.Unmarshal([]byte(params), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", params, got, want)
		}
	}
}
