package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mm-agent/mm/mcpclient"
)

// MCP tools are the tools of the session's MCP servers, offered to the
// model as mcp__<server>__<tool>. They are not built-ins: their schema,
// kind and permission come from the server (kind read when it says it only
// reads, other otherwise; every call asks when the session asks before
// changes, and always when the server's config says permissions: ask).

// MCP is a session's MCP servers, as the tools use them.
type MCP interface {
	Tools() []mcpclient.Tool
	Call(ctx context.Context, name string, args map[string]any) (mcpclient.Result, error)
}

// MCPPrefix starts the name of every MCP tool.
const MCPPrefix = "mcp__"

// mcpTool is one MCP tool as a Tool.
type mcpTool struct{ t mcpclient.Tool }

func (m mcpTool) Name() string            { return m.t.Name }
func (m mcpTool) Description() string     { return m.t.Description }
func (m mcpTool) Schema() json.RawMessage { return append(json.RawMessage(nil), m.t.Schema...) }
func (m mcpTool) Kind() Kind {
	if m.t.ReadOnly {
		return KindRead
	}
	return KindOther
}

// prepareMCP makes the call of an MCP tool: its arguments are the server's
// to check.
func prepareMCP(env Env, name, rawArgs string) (*Call, error) {
	if env.MCP == nil {
		return nil, fmt.Errorf("unknown tool %q: this session has no MCP servers", name)
	}
	var tool *mcpclient.Tool
	for _, t := range env.MCP.Tools() {
		if t.Name == name {
			tool = &t
			break
		}
	}
	if tool == nil {
		return nil, fmt.Errorf("unknown tool %q: no MCP server of this session offers it now", name)
	}
	c := &Call{Tool: mcpTool{*tool}, Kind: mcpTool{*tool}.Kind(), Mutating: true}
	c.Title = tool.Server + ": " + tool.Remote
	if tool.Title != "" {
		c.Title = tool.Server + ": " + tool.Title
	}
	if tool.Ask {
		c.Ask = "the MCP server " + tool.Server + " asks before every call"
	}
	// The server checks the arguments against its schema; here they only
	// need to be an object.
	args := map[string]any{}
	if raw := strings.TrimSpace(rawArgs); raw != "" {
		if err := json.Unmarshal([]byte(raw), &args); err != nil || args == nil {
			return c, fmt.Errorf("%s: the arguments must be a JSON object", name)
		}
	}
	c.Args = args
	return c, nil
}

// runMCP calls the tool; what it returns becomes the model's text, and its
// images and resources the editor's content.
func runMCP(ctx context.Context, env Env, c *Call) Result {
	res, err := env.MCP.Call(ctx, c.Tool.Name(), c.Args)
	switch {
	case ctx.Err() != nil:
		return Result{Output: "[cancelled]", Failed: true}
	case err != nil:
		return Result{Output: "[" + err.Error() + "]", Failed: true}
	}
	var b strings.Builder
	var media []Media
	for _, ct := range res.Content {
		switch ct.Type {
		case "image":
			fmt.Fprintf(&b, "[image: %s, %d bytes of base64]\n", ct.MIMEType, len(ct.Data))
			media = append(media, Media{Type: "image", MIMEType: ct.MIMEType, Data: ct.Data})
		case "resource":
			if ct.Text != "" {
				fmt.Fprintf(&b, "[resource %s]\n%s\n", ct.URI, ct.Text)
			} else {
				fmt.Fprintf(&b, "[resource %s: %s, %d bytes of base64]\n", ct.URI, ct.MIMEType, len(ct.Blob))
			}
			media = append(media, Media{Type: "resource", MIMEType: ct.MIMEType, URI: ct.URI, Text: ct.Text, Data: ct.Blob})
		default:
			b.WriteString(ct.Text)
			if !strings.HasSuffix(ct.Text, "\n") {
				b.WriteByte('\n')
			}
		}
	}
	out := strings.TrimRight(b.String(), "\n")
	if res.IsError && out == "" {
		out = "[the tool failed without saying why]"
	}
	return Result{Output: env.Output.fit(out, commandHead), Failed: res.IsError, Media: media}
}
