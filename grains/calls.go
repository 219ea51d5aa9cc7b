package grains

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/protocol"
)

// A client's request crosses nodes as ACP: the edge decoded its params
// once (protocol's method table), and encodeParams puts their JSON in the
// Call as the SDK's type of the method writes it — what the client sent,
// _meta and annotations included, not a restatement; the grain's node
// decodes it by the same table (acpmethod) with decodeParams and checks it
// again (protocol.Caller.Serve), as it checks anything that comes from
// another node.

// cancelRequest is a $/cancel_request of the prompt request id.
type cancelRequest struct{ id json.RawMessage }

// encodeParams puts the params of a request of method into c: raw, as
// the client sent them (p was decoded and checked from them), or, when
// there are none (a call of the edge's own), p's JSON. It returns, for a request that opens a session, what a session that
// comes back on another node is opened with (Call.reopen).
func encodeParams(c *grainspb.Call, method string, p any, raw json.RawMessage) (*grainspb.Open, error) {
	var open *grainspb.Open
	var err error
	switch v := p.(type) {
	case acp.NewSessionRequest:
		open, err = encodeOpen(v.Cwd, v.AdditionalDirectories, v.McpServers)
	case acp.LoadSessionRequest:
		open, err = encodeOpen(v.Cwd, v.AdditionalDirectories, v.McpServers)
	case acp.ResumeSessionRequest:
		open, err = encodeOpen(v.Cwd, v.AdditionalDirectories, v.McpServers)
	case acp.UnstableForkSessionRequest:
		open, err = encodeOpen(v.Cwd, v.AdditionalDirectories, v.McpServers)
	case cancelRequest:
		p = acpmethod.CancelRequestParams{RequestID: v.id}
	case acp.CancelNotification:
		return nil, nil // the session's id is all it says
	}
	if err != nil {
		return nil, err
	}
	if _, ok := acpmethod.Lookup(method); !ok {
		return nil, fmt.Errorf("%s: mm's nodes carry no such method", method)
	}
	if raw != nil {
		// The client's buffer is the transport's again once read.
		c.Params = bytes.Clone(raw)
		return open, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	c.Params = b
	return open, nil
}

// requestIDOf is the prompt's id a $/cancel_request's Call names (raw
// JSON); nil for any other call.
func requestIDOf(c *grainspb.Call) json.RawMessage {
	if c.Method != acpmethod.CancelRequest {
		return nil
	}
	var p acpmethod.CancelRequestParams
	if json.Unmarshal(c.Params, &p) != nil {
		return nil
	}
	return p.RequestID
}

// decodeParams is the request c carries, as the SDK's type of its method
// (acpmethod's table), its session the call's: a request about a session
// names the session the call is for.
func decodeParams(c *grainspb.Call) (any, error) {
	m, ok := acpmethod.Lookup(c.Method)
	if !ok || m.Params == nil || m.ToClient {
		return nil, fmt.Errorf("mm's nodes carry no method %q", c.Method)
	}
	p, sid, err := decodeOf(m, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Method, err)
	}
	if m.Session && !m.Creates && sid != c.SessionId {
		return nil, fmt.Errorf("%s: params for session %q in a call for session %q", c.Method, sid, c.SessionId)
	}
	return p, nil
}

// decodeOf decodes c's params as method m's type, and reads the session
// they name. A prompt's, nearly every call, is read in one walk where it
// is plain, as the client's node read it (protocol.FastPrompt checks the
// params are JSON first).
func decodeOf(m acpmethod.Method, c *grainspb.Call) (p any, sid string, err error) {
	if c.Method == acp.AgentMethodSessionPrompt {
		if r, ok := protocol.FastPrompt(c.Params); ok {
			return r, string(r.SessionId), nil
		}
	}
	v := m.Params()
	if err := json.Unmarshal(c.Params, v); err != nil {
		return nil, "", err
	}
	return reflect.ValueOf(v).Elem().Interface(), jsonrpc.SessionOf(c.Params), nil
}

// resumeOf is a session/resume of session sid with what o opened it with.
func resumeOf(sid acp.SessionId, o *grainspb.Open) acp.ResumeSessionRequest {
	return acp.ResumeSessionRequest{SessionId: sid, Cwd: o.GetCwd(), AdditionalDirectories: o.GetAdditionalDirectories()}
}

// reopenOf is the session/resume a Call carries for its session, when it
// has one: what opened the session on the client's node.
func reopenOf(c *grainspb.Call) (acp.ResumeSessionRequest, bool) {
	o := c.GetReopen()
	if o == nil {
		return acp.ResumeSessionRequest{}, false
	}
	p := resumeOf(acp.SessionId(c.SessionId), o)
	if servers(o, &p.McpServers) != nil {
		return p, false
	}
	if p.McpServers == nil {
		p.McpServers = []acp.McpServer{}
	}
	return p, true
}

func encodeOpen[S any](cwd string, dirs []string, mcp []S) (*grainspb.Open, error) {
	o := &grainspb.Open{Cwd: cwd, AdditionalDirectories: dirs}
	if mcp != nil {
		b, err := json.Marshal(mcp)
		if err != nil {
			return nil, fmt.Errorf("the MCP servers: %w", err)
		}
		o.McpServers = b
	}
	return o, nil
}

// servers reads o's MCP servers into dst; none (nil) when o has none.
func servers[S any](o *grainspb.Open, dst *[]S) error {
	if len(o.McpServers) == 0 {
		return nil
	}
	if err := json.Unmarshal(o.McpServers, dst); err != nil {
		return fmt.Errorf("the MCP servers: %w", err)
	}
	return nil
}
