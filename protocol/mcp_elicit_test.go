package protocol_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/coder/acp-go-sdk"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const signinScript = `
rules:
  - match: "^signin$"
    steps:
      - toolCalls: [{name: mcp__web__signin, args: {url: "https://login.example.com/start?x=1"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^signin-js$"
    steps:
      - toolCalls: [{name: mcp__web__signin, args: {url: "javascript:alert(1)"}}]
      - {text: "model read: {{last_tool_output}}"}
`

// signinServer is an MCP server over streamable HTTP whose tool signin
// asks its user to open a page (MCP's URL mode elicitation), as a server
// that needs a sign-in to a third party does, and says what came of it.
// caps records whether each client it served claimed URL elicitation.
type signinServer struct {
	url  string
	mu   sync.Mutex
	caps []bool
}

func newSigninServer(t *testing.T) *signinServer {
	t.Helper()
	s := &signinServer{}
	type in struct {
		URL string `json:"url"`
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "signin", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "signin", Description: "signs in"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		c := req.Session.InitializeParams().Capabilities
		s.mu.Lock()
		s.caps = append(s.caps, c != nil && c.Elicitation != nil && c.Elicitation.URL != nil)
		s.mu.Unlock()
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Mode: "url", URL: a.URL, ElicitationID: "e1", Message: "Sign in to the test service"})
		text := ""
		if err != nil {
			text = "error: " + err.Error()
		} else {
			text = "action: " + res.Action
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	s.url = hs.URL
	return s
}

func (s *signinServer) claimed() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.caps...)
}

// TestMCPURLElicitation: an MCP server that asks its user to open a page
// during a tool call (a sign-in) gets it to the user through ACP's
// elicitation/create in URL mode, when the client announced
// elicitation.url: the client sees the page, the message and an id that
// names the server, for the tool call, and the server hears the user's
// accept. A client that did not announce it never gets one: mm does not
// claim URL elicitation to the server, which learns it cannot ask. A page
// that is not http(s) never reaches the client: it is declined, with a
// warning.
func TestMCPURLElicitation(t *testing.T) {
	t.Run("shown", func(t *testing.T) {
		srv := newSigninServer(t)
		e := newEnvScript(t, signinScript, nil)
		if _, err := e.conn.InitURL(e.ctx); err != nil {
			t.Fatal(err)
		}
		e.conn.Client.Elicit = func(p acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
			return acp.UnstableCreateElicitationResponse{Accept: &acp.UnstableCreateElicitationAccept{Action: "accept"}}, nil
		}
		sid := openWith(t, e, acp.McpServer{Http: &acp.McpServerHttpInline{Name: "web", Type: "http", Url: srv.url, Headers: []acp.HttpHeader{}}})
		waitTools(t, e, sid, "mcp__web__signin")
		if res := e.ask(sid, "signin"); res.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("stop reason %s", res.StopReason)
		}
		forms := e.conn.Client.Forms()
		if len(forms) != 1 || forms[0].Url == nil {
			t.Fatalf("the client got %+v, want one URL elicitation; the model read %q", forms, lastContent(e.requestMessages()))
		}
		u := forms[0].Url
		if u.Url != "https://login.example.com/start?x=1" || u.Message != "Sign in to the test service" || u.ElicitationId != "web/e1" || u.Mode != "url" {
			t.Errorf("the client was shown %+v", u)
		}
		// On the wire, the request names its session and tool call, as
		// ACP's session scope has them.
		var wire string
		for _, l := range strings.Split(e.conn.Stdout.String(), "\n") {
			if strings.Contains(l, `"method":"elicitation/create"`) {
				wire = l
			}
		}
		for _, want := range []string{`"sessionId":"` + string(sid) + `"`, `"toolCallId":"call_`, `"mode":"url"`, `"elicitationId":"web/e1"`} {
			if !strings.Contains(wire, want) {
				t.Errorf("elicitation/create on the wire lacks %s: %s", want, wire)
			}
		}
		if got := e.requestMessages(); !strings.Contains(lastContent(got), "action: accept") {
			t.Errorf("the server did not hear the accept: %q", lastContent(got))
		}
		if c := srv.claimed(); len(c) != 1 || !c[0] {
			t.Errorf("mm claimed URL elicitation: %v, want true", c)
		}
	})
	t.Run("not announced", func(t *testing.T) {
		srv := newSigninServer(t)
		e := newEnvScript(t, signinScript, nil)
		sid := openWith(t, e, acp.McpServer{Http: &acp.McpServerHttpInline{Name: "web", Type: "http", Url: srv.url, Headers: []acp.HttpHeader{}}})
		waitTools(t, e, sid, "mcp__web__signin")
		e.ask(sid, "signin")
		if n := len(e.conn.Client.Forms()); n != 0 {
			t.Errorf("a client that does not show pages got %d elicitations", n)
		}
		if got := lastContent(e.requestMessages()); !strings.Contains(got, `does not support "url" elicitation`) && !strings.Contains(got, "does not support elicitation") {
			t.Errorf("the server was not told: %q", got)
		}
		if c := srv.claimed(); len(c) != 1 || c[0] {
			t.Errorf("mm claimed URL elicitation: %v, want false", c)
		}
	})
	t.Run("not a page", func(t *testing.T) {
		srv := newSigninServer(t)
		e := newEnvScript(t, signinScript, nil)
		if _, err := e.conn.InitURL(e.ctx); err != nil {
			t.Fatal(err)
		}
		sid := openWith(t, e, acp.McpServer{Http: &acp.McpServerHttpInline{Name: "web", Type: "http", Url: srv.url, Headers: []acp.HttpHeader{}}})
		waitTools(t, e, sid, "mcp__web__signin")
		e.ask(sid, "signin-js")
		if n := len(e.conn.Client.Forms()); n != 0 {
			t.Errorf("the client was shown %d elicitations of a javascript: URL", n)
		}
		if got := lastContent(e.requestMessages()); !strings.Contains(got, "action: decline") {
			t.Errorf("the server did not hear a decline: %q", got)
		}
	})
}

// lastContent is the content of the last message of a model request.
func lastContent(msgs []map[string]any) string {
	if len(msgs) == 0 {
		return ""
	}
	s, _ := msgs[len(msgs)-1]["content"].(string)
	return s
}
