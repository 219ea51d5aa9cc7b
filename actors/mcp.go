package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mm-agent/mm/mcpclient"
)

// A session's MCP servers (the editor's mcpServers and mcp.servers) are
// connected in the background when the session starts, so session/new
// answers at once; their tools join the session's tool list as soon as
// they are listed. A server that fails or dies is a warning on stderr and a
// one-line note at the start of the next turn, never an error.

// mcpChanged says the session's MCP tools changed.
type mcpChanged struct{}

// mcpWarning is a problem with one of the session's MCP servers.
type mcpWarning struct{ Text string }

// mcpServers are the servers a session connects to: the config's, then
// the editor's, all within mcp.timeout and mcp.maxTools unless the
// config gives a server its own timeout.
func (rt *Runtime) mcpServers(fromEditor []mcpclient.Server) []mcpclient.Server {
	var out []mcpclient.Server
	for _, m := range rt.cfg.MCP.Servers {
		srv := mcpclient.Server{Name: m.Name, Command: m.Command, Args: m.Args, Env: m.Env,
			URL: m.URL, Headers: m.Headers, Ask: m.Permissions == "ask"}
		if m.Timeout > 0 {
			srv.Timeout, srv.TimeoutKey = m.Timeout, fmt.Sprintf("the timeout of mcp.servers %q", m.Name)
		}
		out = append(out, srv)
	}
	out = append(out, fromEditor...)
	for i := range out {
		if out[i].Timeout == 0 {
			out[i].Timeout, out[i].TimeoutKey = rt.cfg.MCP.Timeout, "mcp.timeout"
		}
		out[i].MaxTools = rt.cfg.MCP.MaxTools
	}
	return out
}

// maxMCPNotes bounds the notes kept for the next turn: a server that
// fails again and again must not grow them.
const maxMCPNotes = 16

// startMCP connects the session's servers, off the actor.
func (s *session) startMCP(ctx actor.Context, servers []mcpclient.Server) {
	if len(servers) == 0 {
		return
	}
	root, self := ctx.ActorSystem().Root, ctx.Self()
	s.mcp = mcpclient.ConnectWith(servers, s.cwd, s.id, mcpclient.Options{
		Log:       s.rt.log,
		OnChange:  func() { root.Send(self, &mcpChanged{}) },
		OnWarning: func(w string) { root.Send(self, &mcpWarning{Text: w}) },
		Confine:   s.confine(),
		// A server may ask the user to open a page (a sign-in) when the
		// client can show one.
		ElicitURL: s.client != nil && s.client.Caps(s.id).Has(CapElicitURL),
	})
}

func (s *session) onMCPChanged() {
	if s.mcp == nil {
		return
	}
	s.useTools()
}

func (s *session) onMCPWarning(m *mcpWarning) {
	s.rt.log.Warn(fmt.Sprintf("[acp] session %s: %s", s.id, m.Text))
	switch {
	case len(s.mcpNotes) < maxMCPNotes:
		s.mcpNotes = append(s.mcpNotes, m.Text)
	default:
		s.mcpNotesLeft++
	}
}

// tellMCPNotes says, once, what went wrong with the MCP servers since the
// last turn.
func (s *session) tellMCPNotes() {
	for _, n := range s.mcpNotes {
		s.warn(Notice{Severity: "warning", Title: n})
	}
	if s.mcpNotesLeft > 0 {
		s.warn(Notice{Severity: "warning", Title: fmt.Sprintf("and %d more MCP warnings (see mm's log)", s.mcpNotesLeft)})
	}
	s.mcpNotes, s.mcpNotesLeft = nil, 0
}
