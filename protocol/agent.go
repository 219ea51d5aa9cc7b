package protocol

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/mcpclient"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// Version is the binary's version: agentInfo.version and `mm --version`.
// Release builds set it with -ldflags "-X github.com/mm-agent/mm/protocol.Version=…".
var Version = "v0.1.0"

// Agent is one connection's side of ACP: the requests about the
// connection (initialize, authenticate, logout, session/list), mm's own
// requests to its client (calls), and, in a cluster, the Forwarder that
// carries its sessions' requests to their nodes. Its session requests are
// served by its Caller (caller.go), which it is.
type Agent struct {
	*Caller
	box *outbox
	// rpc is the connection: its tables of the client's requests in
	// flight and of mm's calls (calls.go) waiting for their answers.
	rpc *jsonrpc.Conn
	// forward, when set, takes the session requests: their sessions live
	// on the cluster's nodes (forward.go).
	forward Forwarder

	// client is what the client said it can do at initialize.
	clientMu    sync.Mutex
	client      acp.ClientCapabilities
	sessionCaps actors.Caps
}

// caps are the session capabilities the client announced at initialize.
func (a *Agent) caps() actors.Caps {
	a.clientMu.Lock()
	defer a.clientMu.Unlock()
	return a.sessionCaps
}

// noteCaps reads the session capabilities of initialize's params
// (clientCapabilities.session, which the Go SDK's types do not hold yet),
// and elicitation.url.
func (a *Agent) noteCaps(raw json.RawMessage) {
	var c actors.Caps
	set := func(path string, x actors.Caps) {
		if v := gjson.GetBytes(raw, "clientCapabilities.session."+path); v.IsObject() {
			c |= x
		}
	}
	set("notices", actors.CapNotices)
	set("compaction", actors.CapCompaction)
	set("configOptions.boolean", actors.CapBoolOptions)
	if gjson.GetBytes(raw, "clientCapabilities.elicitation.url").IsObject() {
		c |= actors.CapElicitURL
	}
	a.clientMu.Lock()
	a.sessionCaps = c
	a.clientMu.Unlock()
}

// forms says whether the client shows forms (elicitation.form).
func (a *Agent) forms() bool {
	a.clientMu.Lock()
	defer a.clientMu.Unlock()
	e := a.client.Elicitation
	return e != nil && e.Form != nil
}

// runtime returns the actor runtime, waiting for it to be up.
func (c *Caller) runtime() *actors.Runtime { return c.hub.runtime() }

// isClosed says whether the connection takes no more sessions.
func (c *Caller) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// live returns session id when this connection holds it.
func (c *Caller) live(id string) *actors.Session {
	s, _ := c.hub.sessions.Attached(id, c)
	return s
}

// register adds a session this connection created or opened, held by it.
func (c *Caller) register(s *actors.Session, mcp int) (*actors.Session, error) {
	return c.hub.register(s, c.owner, c, mcp)
}

// unregister takes session id out of the table when this connection holds
// it.
func (c *Caller) unregister(id string) *actors.Session {
	s, _ := c.hub.sessions.Release(id, c)
	return s
}

// on is the connection a session this Caller opens speaks through: what it
// writes to and whom it asks.
func (c *Caller) on() actors.Attachment { return actors.Attachment{Out: c.out, Client: c.asks} }

// connection is this connection's number in the runtime's table, entered
// there the first time a session moves to it (the runtime is up then);
// it leaves the table as the connection lets its sessions go (letGo). A
// connection closed by then is entered no more: 0, none, and the session
// that moves to it is detached, as letGo would detach it.
func (c *Caller) connection() actors.ConnID {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == 0 && !c.closed {
		c.conn = c.runtime().Connect(c.on())
	}
	return c.conn
}

// attach gives the state of a session this connection creates or opens
// the folders its file tools may open.
func (c *Caller) attach(st *actors.SessionState) *actors.SessionState {
	st.Roots = c.roots
	return st
}

// Initialize negotiates the protocol version and says who we are.
func (a *Agent) Initialize(_ context.Context, p acp.InitializeRequest) (_ acp.InitializeResponse, err error) {
	defer a.surviveSDK("initialize", &err)
	a.clientMu.Lock()
	a.client = p.ClientCapabilities
	a.clientMu.Unlock()
	client := "an unnamed client"
	if p.ClientInfo != nil {
		client = strings.TrimSpace(p.ClientInfo.Name + " " + p.ClientInfo.Version)
	}
	form := p.ClientCapabilities.Elicitation != nil && p.ClientCapabilities.Elicitation.Form != nil
	a.log.Info(fmt.Sprintf("[acp] initialize: client %s, protocol %d, elicitation(form)=%t", client, p.ProtocolVersion, form))
	info := acp.Implementation{Name: a.cfg.ACP.Name, Version: Version}
	if a.cfg.ACP.Title != "" {
		info.Title = acp.Ptr(a.cfg.ACP.Title)
	}
	return acp.InitializeResponse{
		// We speak version 1 only: a client asking for it gets it, any
		// other gets our latest, and decides.
		ProtocolVersion:   acp.ProtocolVersion(acp.ProtocolVersionNumber),
		AgentCapabilities: a.capabilities(),
		AgentInfo:         &info,
		AuthMethods:       []acp.AuthMethod{},
	}, nil
}

// Authenticate has nothing to check: mm needs no login.
func (a *Agent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

// serveNewAs creates a session actor for an existing, absolute cwd, off
// the ingress (creating one reads the disk), with the session's id chosen
// by the caller (a cluster's edge, which places the session by its id);
// "" makes one. Its response is queued on the session's ordered writer,
// then the session announces its commands behind it: an editor drops
// notifications for a session id it does not know yet.
func (c *Caller) serveNewAs(r actors.Reply, p acp.NewSessionRequest, id string, _ *actors.Here) {
	c.create(r, func() (string, any, error) {
		defer c.survive("session/new", r)
		cwd, err := c.checkCwd(p.Cwd)
		if err != nil {
			return "", nil, err
		}
		dirs, err := c.checkDirs(p.AdditionalDirectories)
		if err != nil {
			return "", nil, err
		}
		if id == "" {
			id = actors.NewSessionID(time.Now())
		}
		mcp := c.mcpProcs(p.McpServers)
		if err := c.roomFor(mcp); err != nil {
			return "", nil, err
		}
		if err := c.claimFolders(append([]string{cwd}, dirs...)...); err != nil {
			return "", nil, err
		}
		c.know(cwd)
		rt := c.runtime()
		s, err := c.register(rt.SpawnSession(c.attach(&actors.SessionState{ID: id, Cwd: cwd, Dirs: dirs, Owner: c.owner, MCP: c.mcpServers(p.McpServers)}), c.on()), mcp)
		if err != nil {
			return "", nil, err
		}
		if c.cfg.Sessions.Enabled {
			// The session exists once its file does: a crash after this
			// response cannot lose it.
			if err := s.Flush(); err != nil {
				// A session the store did not take would be lost by the
				// next crash: the client is told now, and the session ends.
				c.log.Error(fmt.Sprintf("[acp] session %s: saving: %v", id, err))
				c.unregister(id)
				s.Close()
				return "", nil, jsonrpc.Internal(err.Error(), nil)
			}
			c.hub.store.NoteFolder(cwd)
		}
		c.log.Info(fmt.Sprintf("[acp] session %s created in %s (%d MCP server(s) from the editor)", id, cwd, len(p.McpServers)))
		return id, acp.NewSessionResponse{
			SessionId:     acp.SessionId(id),
			Meta:          c.sessionMeta(store.Provenance{SessionID: id, Kind: "root"}, rt.SandboxMode(), rt.Network()),
			Modes:         modes(rt.DefaultMode()),
			ConfigOptions: c.configOptions("default", rt.SandboxMode(), rt.Network()),
		}, nil
	})
}

// checkCwd is checkCwdOf for this connection: a cwd outside every root
// of the connection is refused, naming the roots.
func (c *Caller) checkCwd(raw string) (string, error) {
	cwd, err := checkCwdOf(raw)
	if err != nil && c.node != "" && filepath.IsAbs(tools.TranslatePath(raw)) {
		if _, statErr := os.Stat(tools.TranslatePath(raw)); statErr != nil {
			// This node of a cluster cannot see the folder: it refuses to
			// host the session, saying why.
			return "", acp.NewInvalidParams(map[string]any{"cwd": raw, "node": c.node, "error": fmt.Sprintf(
				"cwd %q does not exist on mm node %s: a session's cwd must be the same path on every node of the cluster (a shared volume)", raw, c.node)})
		}
	}
	if err != nil || len(c.roots) == 0 {
		return cwd, err
	}
	// The folders on disk, not their names: a link inside a root that
	// points out of it is outside.
	real, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		return "", acp.NewInvalidParams(map[string]any{"cwd": raw, "error": fmt.Sprintf("cwd %q: %v", raw, err)})
	}
	for _, root := range c.roots {
		if tools.Inside(real, tools.RealPath(root)) {
			return cwd, nil
		}
	}
	return "", acp.NewInvalidParams(map[string]any{"cwd": raw, "roots": c.roots,
		"error": fmt.Sprintf("cwd %q is outside the folders this server serves (serve.roots: %s)", raw, strings.Join(c.roots, ", "))})
}

// checkDirs checks a request's additionalDirectories as cwds (absolute,
// existing, inside the server's roots) and returns them cleaned: the
// session's commands may write them in workspace-write.
func (c *Caller) checkDirs(dirs []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		dir, err := c.checkCwd(d)
		if err != nil {
			return nil, err
		}
		out = append(out, dir)
	}
	return out, nil
}

// checkCwdOf translates a Windows or WSL path and requires an existing,
// absolute directory.
func checkCwdOf(raw string) (string, error) {
	cwd := tools.TranslatePath(raw)
	bad := func(why string) error {
		return acp.NewInvalidParams(map[string]any{"cwd": raw, "error": why})
	}
	if !filepath.IsAbs(cwd) {
		return "", bad(fmt.Sprintf("cwd %q is not an absolute path", raw))
	}
	cwd = filepath.Clean(cwd)
	fi, err := os.Stat(cwd)
	if err != nil {
		return "", bad(fmt.Sprintf("cwd %q does not exist", raw))
	}
	if !fi.IsDir() {
		return "", bad(fmt.Sprintf("cwd %q is not a directory", raw))
	}
	return cwd, nil
}

// unknownSession is the error for a session id this connection does not
// have open, or that is not stored (load, resume): ACP's -32002, with the
// session's id in its data. A second session/close gets it too, which the
// TypeScript SDK takes as "already closed".
func unknownSession(id string) *acp.RequestError {
	return &acp.RequestError{Code: codeNoSession, Message: fmt.Sprintf("Resource not found: unknown session %q", id),
		Data: map[string]any{"sessionId": id, "error": fmt.Sprintf("unknown session %q", id)}}
}

// maxCreating bounds the session creations served at once.
const maxCreating = 16

// create serves a request that creates a session (session/new,
// session/fork) off the ingress's goroutine, which must not wait on the
// disk: its response is queued on the new session's ordered writer, then
// the session announces its commands behind it. The caller waits for a
// free creator: a flood of creations slows the reading down. A remote
// client's creation, served from a grain's Receive, waits for it on its
// own goroutine instead.
func (c *Caller) create(r actors.Reply, make func() (string, any, error)) {
	if run := c.creation(r); run != nil {
		go run(make)
	}
}

// creation counts request r among the connection's creations (a closing
// connection waits for them), or answers it that mm is shutting down
// (nil). run makes the session and answers r, on a goroutine of the
// caller's: at once (create) or once what it needs is read (a fork of a
// stored session).
func (c *Caller) creation(r actors.Reply) (run func(make func() (string, any, error))) {
	if !c.inMailbox {
		c.creators <- struct{}{}
	}
	c.mu.Lock()
	closed := c.draining
	if !closed {
		c.creating.Add(1)
	}
	c.mu.Unlock()
	if closed {
		if !c.inMailbox {
			<-c.creators
		}
		c.answer("", r, nil, errShuttingDown)
		return nil
	}
	return func(make func() (string, any, error)) {
		if c.inMailbox {
			c.creators <- struct{}{}
		}
		defer func() {
			<-c.creators
			c.creating.Done()
		}()
		sid, resp, err := make()
		if err != nil {
			c.answer("", r, nil, toRequestError(err))
			return
		}
		c.answer(sid, r, resp, nil)
		if s := c.live(sid); s != nil {
			s.Announce()
		}
	}
}

// servePrompt starts a prompt's turn in its session's order; its response
// comes from the outbox once the turn has ended. A $/cancel_request finds
// it in its session (Session.CancelRequest).
//
// here, on a node of a cluster, is the session's actor serving the call
// (actors.Here).
func (c *Caller) servePrompt(r actors.Reply, p acp.PromptRequest, here *actors.Here) {
	sid := string(p.SessionId)
	s := c.live(sid)
	if s == nil {
		c.answer(sid, r, nil, unknownSession(sid))
		return
	}
	seq, refused := s.Start(p.Prompt, r, here)
	if refused != nil {
		c.out.Answer(sid, r, refused) // its end was on its way
		return
	}
	if c.isDraining() {
		// Read before the connection ended, served after: it is
		// answered, cancelled.
		s.CancelPrompt(seq)
	}
}

// Cancel cancels the session's prompts started so far, running or queued.
// A cancel is a notification: an unknown session is only logged.
func (c *Caller) Cancel(_ context.Context, p acp.CancelNotification) error {
	c.cancelSession(string(p.SessionId), nil)
	return nil
}

// cancelSession cancels session sid's prompts started so far; here is as
// servePrompt's.
func (c *Caller) cancelSession(sid string, here *actors.Here) {
	s := c.live(sid)
	if s == nil {
		c.log.Warn(fmt.Sprintf("[acp] session/cancel: unknown session %q", sid))
		return
	}
	s.Cancel(here)
}

// Logout ends nothing and succeeds: mm has no login of its own
// (authMethods is empty). Over the network the token is what admits a
// client; it is revoked in the server's config (serve.tokens), not by
// the client that holds it.
func (a *Agent) Logout(context.Context, acp.LogoutRequest) (acp.LogoutResponse, error) {
	a.log.Info("[acp] logout: mm has no login to end")
	return acp.LogoutResponse{}, nil
}

// mcpServers turns the editor's MCP servers into the sessions': stdio and
// streamable HTTP. SSE is not advertised; such a server fails to start,
// which the user is told as of any other server.
func (c *Caller) mcpServers(in []acp.McpServer) []mcpclient.Server {
	var out []mcpclient.Server
	for _, m := range in {
		switch {
		case m.Stdio != nil:
			env := map[string]string{}
			for _, e := range m.Stdio.Env {
				env[e.Name] = e.Value
			}
			out = append(out, mcpclient.Server{Name: m.Stdio.Name, Command: m.Stdio.Command, Args: m.Stdio.Args, Env: env})
		case m.Http != nil:
			headers := map[string]string{}
			for _, h := range m.Http.Headers {
				headers[h.Name] = h.Value
			}
			out = append(out, mcpclient.Server{Name: m.Http.Name, URL: m.Http.Url, Headers: headers})
		case m.Sse != nil:
			out = append(out, mcpclient.Server{Name: m.Sse.Name, Unsupported: "mm does not speak MCP's SSE transport (mcpCapabilities.sse is false): use stdio or streamable HTTP"})
		}
	}
	return out
}
