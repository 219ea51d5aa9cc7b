package protocol

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/mcpclient"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// Version is the binary's version: agentInfo.version and `mm --version`.
// Release builds set it with -ldflags "-X github.com/mm-agent/mm/protocol.Version=…".
var Version = "v0.1.0"

// Agent implements acp.Agent for one connection. The ingress (ingress.go)
// calls it for the requests it serves itself, the SDK's connection for the
// others. The sessions it serves are the Hub's that it holds.
type Agent struct {
	hub *Hub
	cfg *configs.Config
	box *outbox
	log *slog.Logger
	// owner is the token the connection came with (mm serve), "" for mm
	// -acp's; roots are the folders its sessions' cwds must be in (none:
	// any).
	owner string
	roots []string
	// shared is set for a connection on a hub it shares with others (mm
	// serve): its sessions outlive it, detached, and can be taken up again.
	shared bool
	// node names this node of a cluster, "" outside one.
	node string
	// forward, when set, takes the session requests: their sessions live
	// on the cluster's nodes (forward.go).
	forward Forwarder
	// ctx is the context of the requests the ingress serves: the
	// connection's lifetime.
	ctx context.Context

	// creating counts the session/new and session/fork requests being
	// served, which shutdown waits for; creators bounds them: the ingress
	// waits for a free one, so a flood of them slows its reading down.
	creating sync.WaitGroup
	creators chan struct{}
	// calls are mm's own requests to the client (calls.go).
	calls calls
	// prompts are the client's prompt requests not yet answered, for
	// $/cancel_request (prompt.go).
	prompts prompts

	mu sync.Mutex
	// cwds are the project folders this connection has named (new, load,
	// resume, fork, list): where session/delete, which names no folder,
	// looks for a stored session.
	cwds   map[string]bool
	client acp.ClientCapabilities
	// draining is set when the connection ends: no session creation
	// starts any more, and prompts end cancelled; closed once those in
	// flight are done: no session is registered on it any more.
	draining, closed bool
}

// runtime returns the actor runtime, waiting for it to be up.
func (a *Agent) runtime() *actors.Runtime { return a.hub.runtime() }

// isClosed says whether the connection takes no more sessions.
func (a *Agent) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// live returns session id when this connection holds it.
func (a *Agent) live(id string) *actors.Session {
	s, _ := a.hub.sessions.Attached(id, a)
	return s
}

// register adds a session this connection created or opened, held by it.
func (a *Agent) register(s *actors.Session) (*actors.Session, error) {
	return a.hub.register(s, a.owner, a)
}

// unregister takes session id out of the table when this connection holds
// it.
func (a *Agent) unregister(id string) *actors.Session {
	s, _ := a.hub.sessions.Release(id, a)
	return s
}

// attach is what a session this connection creates or takes over writes
// to and asks.
func (a *Agent) attach(st *actors.SessionState) *actors.SessionState {
	st.Out, st.Client = a.box, client{a: a}
	return st
}

// Initialize negotiates the protocol version and says who we are.
func (a *Agent) Initialize(_ context.Context, p acp.InitializeRequest) (_ acp.InitializeResponse, err error) {
	defer a.surviveSDK("initialize", &err)
	a.mu.Lock()
	a.client = p.ClientCapabilities
	a.mu.Unlock()
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

// serveNew creates a session actor for an existing, absolute cwd, off the
// ingress (creating one reads the disk). Its response is queued on the
// session's ordered writer, then the session announces its commands
// behind it: an editor drops notifications for a session id it does not
// know yet.
func (a *Agent) serveNew(r actors.Reply, p acp.NewSessionRequest) {
	a.serveNewAs(r, p, "")
}

// serveNewAs is serveNew with the session's id chosen by the caller (a
// cluster's edge, which places the session by its id); "" makes one.
func (a *Agent) serveNewAs(r actors.Reply, p acp.NewSessionRequest, id string) {
	a.create(r, func() (string, any, error) {
		defer a.survive("session/new", r)
		cwd, err := a.checkCwd(p.Cwd)
		if err != nil {
			return "", nil, err
		}
		if err := a.checkDirs(p.AdditionalDirectories); err != nil {
			return "", nil, err
		}
		a.know(cwd)
		if id == "" {
			id = actors.NewSessionID(time.Now())
		}
		rt := a.runtime()
		s, err := a.register(rt.SpawnSession(a.attach(&actors.SessionState{ID: id, Cwd: cwd, Owner: a.owner, MCP: a.mcpServers(p.McpServers)})))
		if err != nil {
			return "", nil, err
		}
		if a.cfg.Sessions.Enabled {
			// The session exists once its file does: a crash after this
			// response cannot lose it.
			if err := s.Flush(); err != nil {
				a.log.Error(fmt.Sprintf("[acp] session %s: saving: %v", id, err))
			}
			a.hub.store.NoteFolder(cwd)
		}
		a.log.Info(fmt.Sprintf("[acp] session %s created in %s (%d MCP server(s) from the editor)", id, cwd, len(p.McpServers)))
		return id, acp.NewSessionResponse{
			SessionId:     acp.SessionId(id),
			Meta:          provenanceMeta(store.Provenance{SessionID: id, Kind: "root"}),
			Modes:         modes(rt.DefaultMode()),
			ConfigOptions: a.configOptions("default"),
		}, nil
	})
}

// checkCwd is checkCwdOf for this connection: a cwd outside every root
// of the connection is refused, naming the roots.
func (a *Agent) checkCwd(raw string) (string, error) {
	cwd, err := checkCwdOf(raw)
	if err != nil && a.node != "" {
		if _, statErr := os.Stat(tools.TranslatePath(raw)); statErr != nil {
			// This node of a cluster cannot see the folder: it refuses to
			// host the session, saying why.
			return "", acp.NewInvalidParams(map[string]any{"cwd": raw, "node": a.node, "error": fmt.Sprintf(
				"cwd %q does not exist on mm node %s: a session's cwd must be the same path on every node of the cluster (a shared volume)", raw, a.node)})
		}
	}
	if err != nil || len(a.roots) == 0 {
		return cwd, err
	}
	for _, root := range a.roots {
		if rel, err := filepath.Rel(root, cwd); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return cwd, nil
		}
	}
	return "", acp.NewInvalidParams(map[string]any{"cwd": raw, "roots": a.roots,
		"error": fmt.Sprintf("cwd %q is outside the folders this server serves (serve.roots: %s)", raw, strings.Join(a.roots, ", "))})
}

// checkDirs checks a request's additionalDirectories as cwds: mm works in
// its cwd only (it does not advertise additional directories), but one
// outside the roots is refused all the same.
func (a *Agent) checkDirs(dirs []string) error {
	for _, d := range dirs {
		if _, err := a.checkCwd(d); err != nil {
			return err
		}
	}
	return nil
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
// have open.
func unknownSession(id string) *acp.RequestError {
	return acp.NewInvalidParams(map[string]any{"sessionId": id, "error": fmt.Sprintf("unknown session %q", id)})
}

// maxCreating bounds the session creations served at once.
const maxCreating = 16

// create serves a request that creates a session (session/new,
// session/fork) off the ingress's goroutine, which must not wait on the
// disk: its response is queued on the new session's ordered writer, then
// the session announces its commands behind it. The caller waits for a
// free creator: a flood of creations slows the reading down.
func (a *Agent) create(r actors.Reply, make func() (string, any, error)) (started bool) {
	a.creators <- struct{}{}
	a.mu.Lock()
	closed := a.draining
	if !closed {
		a.creating.Add(1)
	}
	a.mu.Unlock()
	if closed {
		<-a.creators
		a.answer("", r, nil, errShuttingDown)
		return false
	}
	go func() {
		defer func() {
			<-a.creators
			a.creating.Done()
		}()
		sid, resp, err := make()
		if err != nil {
			a.answer("", r, nil, toRequestError(err))
			return
		}
		a.answer(sid, r, resp, nil)
		if s := a.live(sid); s != nil {
			s.Announce()
		}
	}()
	return true
}

// servePrompt starts a prompt's turn in its session's order; its response
// comes from the outbox once the turn has ended. The request is kept by
// id until then, for $/cancel_request.
func (a *Agent) servePrompt(r actors.Reply, p acp.PromptRequest) {
	sid := string(p.SessionId)
	ref := a.prompts.keep(r)
	s := a.live(sid)
	if s == nil {
		a.answer(sid, r, nil, unknownSession(sid))
		return
	}
	seq, err := s.Start(p.Prompt, r)
	if err != nil {
		a.answer(sid, r, nil, acp.NewInvalidRequest(map[string]any{"sessionId": sid, "error": err.Error()}))
		return
	}
	if ref.started(s, seq) {
		s.CancelPrompt(seq) // its $/cancel_request came first
	}
	if a.isDraining() {
		// Read before the connection ended, served after: it is
		// answered, cancelled.
		s.CancelPrompt(seq)
	}
}

// Cancel cancels the session's prompts started so far, running or queued.
// A cancel is a notification: an unknown session is only logged.
func (a *Agent) Cancel(_ context.Context, p acp.CancelNotification) error {
	sid := string(p.SessionId)
	s := a.live(sid)
	if s == nil {
		a.log.Warn(fmt.Sprintf("[acp] session/cancel: unknown session %q", sid))
		return nil
	}
	s.Cancel()
	return nil
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
func (a *Agent) mcpServers(in []acp.McpServer) []mcpclient.Server {
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
