package grains

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/coder/acp-go-sdk"
	"google.golang.org/protobuf/proto"

	"github.com/mm-agent/mm/grains/grainspb"
)

// TestCallsCrossNodesTyped: every request a session's node serves comes
// out of its Call as the SDK's value the edge decoded, over the wire's
// bytes (the _meta and annotations mm never reads stay behind).
func TestCallsCrossNodesTyped(t *testing.T) {
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
		{acp.AgentMethodSessionPrompt, acp.PromptRequest{SessionId: sid, MessageId: new("m-1"), Prompt: []acp.ContentBlock{
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
		if err := encodeParams(call, tc.method, tc.p); err != nil {
			t.Fatalf("%s: %v", tc.method, err)
		}
		wire, err := proto.Marshal(call)
		if err != nil {
			t.Fatal(err)
		}
		var back grainspb.Call
		if err := proto.Unmarshal(wire, &back); err != nil {
			t.Fatal(err)
		}
		got, err := decodeParams(&back)
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
		"an unknown method":         {Method: "session/nope", SessionId: "s"},
		"a prompt block with none":  {Method: acp.AgentMethodSessionPrompt, SessionId: "s", Params: &grainspb.Call_Prompt{Prompt: &grainspb.Prompt{Blocks: []*grainspb.Content{{}}}}},
		"a resource with none":      {Method: acp.AgentMethodSessionPrompt, SessionId: "s", Params: &grainspb.Call_Prompt{Prompt: &grainspb.Prompt{Blocks: []*grainspb.Content{{Block: &grainspb.Content_Resource{Resource: &grainspb.Resource{Uri: "u"}}}}}}},
		"MCP servers that are not":  {Method: acp.AgentMethodSessionNew, SessionId: "s", Params: &grainspb.Call_Open{Open: &grainspb.Open{Cwd: "/w", McpServers: []byte("{")}}},
		"a config option, no value": {Method: acp.AgentMethodSessionSetConfigOption, SessionId: "s", Params: &grainspb.Call_SetConfigOption{SetConfigOption: &grainspb.SetConfigOption{ConfigId: "x"}}},
	} {
		if p, err := decodeParams(c); err == nil {
			t.Errorf("%s: taken as %#v", name, p)
		}
	}
}
