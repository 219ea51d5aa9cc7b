package protocol

import (
	"context"
	"encoding/json"
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
// others.
type Agent struct {
	cfg  *configs.Config
	rt   *actors.Runtime
	box  *outbox
	log  *slog.Logger
	conn *acp.AgentSideConnection
	// ctx is the context of the requests the ingress serves: the
	// connection's lifetime.
	ctx context.Context

	// ready is closed once rt is set; only runtime() reads rt before that.
	ready chan struct{}
	// creating counts the session/new and session/fork requests being
	// served, which shutdown waits for; creators bounds them: the ingress
	// waits for a free one, so a flood of them slows its reading down.
	creating sync.WaitGroup
	creators chan struct{}
	// calls are mm's own requests to the client (calls.go).
	calls calls

	mu       sync.Mutex
	sessions map[string]*actors.Session
	// cwds are the project folders this connection has named (new, load,
	// resume, fork, list): where session/delete, which names no folder,
	// looks for a stored session.
	cwds   map[string]bool
	client acp.ClientCapabilities
	// draining is set when the connection ends: no session creation
	// starts any more; closed once those in flight are done: no session
	// is registered any more.
	draining, closed bool
}

// runtime returns the actor runtime, waiting for it to be up.
func (a *Agent) runtime() *actors.Runtime {
	<-a.ready
	return a.rt
}

var _ acp.Agent = (*Agent)(nil)

// Initialize negotiates the protocol version and says who we are.
func (a *Agent) Initialize(_ context.Context, p acp.InitializeRequest) (_ acp.InitializeResponse, err error) {
	defer a.survive("initialize", &err)
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

// NewSession creates a session actor for an existing, absolute cwd. Its
// caller queues the response, then calls Announce on the session
// (serveCreation): available_commands_update must follow the response, as
// an editor drops notifications for a session id it does not know yet.
func (a *Agent) NewSession(_ context.Context, p acp.NewSessionRequest) (_ acp.NewSessionResponse, err error) {
	defer a.survive("session/new", &err)
	cwd, err := checkCwd(p.Cwd)
	if err != nil {
		return acp.NewSessionResponse{}, err
	}
	a.know(cwd)
	id := actors.NewSessionID(time.Now())
	rt := a.runtime()
	s, err := a.register(rt.SpawnSession(&actors.SessionState{ID: id, Cwd: cwd, MCP: a.mcpServers(p.McpServers)}))
	if err != nil {
		return acp.NewSessionResponse{}, err
	}
	if a.cfg.Sessions.Enabled {
		// The session exists once its file does: a crash after this
		// response cannot lose it.
		if err := s.Flush(); err != nil {
			a.log.Error(fmt.Sprintf("[acp] session %s: saving: %v", id, err))
		}
	}
	a.log.Info(fmt.Sprintf("[acp] session %s created in %s (%d MCP server(s) from the editor)", id, cwd, len(p.McpServers)))
	return acp.NewSessionResponse{
		SessionId:     acp.SessionId(id),
		Meta:          provenanceMeta(store.Provenance{SessionID: id, Kind: "root"}),
		Modes:         modes(rt.DefaultMode()),
		ConfigOptions: a.configOptions("default"),
	}, nil
}

// checkCwd translates a Windows or WSL path and requires an existing,
// absolute directory.
func checkCwd(raw string) (string, error) {
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

func (a *Agent) session(id acp.SessionId) (*actors.Session, error) {
	a.mu.Lock()
	s := a.sessions[string(id)]
	a.mu.Unlock()
	if s == nil {
		return nil, acp.NewInvalidParams(map[string]any{"sessionId": string(id), "error": fmt.Sprintf("unknown session %q", id)})
	}
	return s, nil
}

// maxCreating bounds the session creations served at once.
const maxCreating = 16

// serveCreation serves a request that creates a session (session/new,
// session/fork) off the ingress's goroutine, which may wait on the disk:
// its response is queued on the new session's ordered writer, then the
// session announces its commands behind it.
func (a *Agent) serveCreation(id json.RawMessage, create func() (acp.SessionId, any, error)) {
	id = append(json.RawMessage(nil), id...)
	a.creators <- struct{}{}
	a.mu.Lock()
	closed := a.draining
	if !closed {
		a.creating.Add(1)
	}
	a.mu.Unlock()
	if closed {
		<-a.creators
		a.box.Respond("", id, nil, errShuttingDown)
		return
	}
	go func() {
		defer func() {
			<-a.creators
			a.creating.Done()
		}()
		sid, resp, err := create()
		if err != nil {
			a.box.Respond("", id, nil, toRequestError(err))
			return
		}
		a.box.Respond(string(sid), id, resp, nil)
		if s := a.live(string(sid)); s != nil {
			s.Announce()
		}
	}()
}

// Prompt runs one turn and answers when it has ended and its updates are
// written. The prompts read from stdin reach the same Session.Start through
// the ingress, which answers them from the outbox without a goroutine
// waiting; this is the acp.Agent method for a caller that serves the
// request itself. Cancellation reaches the turn through Cancel, not through
// ctx: the SDK also cancels ctx when a second prompt for the session
// arrives, and that prompt must queue behind this one instead.
func (a *Agent) Prompt(_ context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	res, err := s.Prompt(p.Prompt)
	if err != nil {
		return acp.PromptResponse{}, acp.NewInvalidRequest(map[string]any{"sessionId": s.ID, "error": err.Error()})
	}
	if res.Err != "" {
		return acp.PromptResponse{}, acp.NewInternalError(map[string]any{"error": res.Err})
	}
	out := acp.PromptResponse{StopReason: res.StopReason, Usage: res.Usage}
	if res.Provenance.SessionID != "" {
		out.Meta = provenanceMeta(res.Provenance) // /new and /compact change it
	}
	return out, nil
}

// Cancel cancels the session's prompts started so far, running or queued.
// A cancel is a notification: an unknown session is only logged.
func (a *Agent) Cancel(_ context.Context, p acp.CancelNotification) error {
	s := a.live(string(p.SessionId))
	if s == nil {
		a.log.Warn(fmt.Sprintf("[acp] session/cancel: unknown session %q", p.SessionId))
		return nil
	}
	s.Cancel()
	return nil
}

// Logout has nothing to end: mm needs no login.
func (a *Agent) Logout(context.Context, acp.LogoutRequest) (acp.LogoutResponse, error) {
	return acp.LogoutResponse{}, acp.NewMethodNotFound(acp.AgentMethodLogout)
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
