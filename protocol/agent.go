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
	"github.com/mm-agent/mm/internal/gopool"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// Version is the binary's version: agentInfo.version and `mm --version`.
// Release builds set it with -ldflags "-X github.com/mm-agent/mm/protocol.Version=…".
var Version = "v0.1.0"

// Agent implements acp.Agent for one connection.
type Agent struct {
	cfg  *configs.Config
	rt   *actors.Runtime
	out  *wireOut
	box  *outbox
	log  *slog.Logger
	conn *acp.AgentSideConnection

	// ready is closed once rt is set; only runtime() reads rt before that.
	ready chan struct{}
	// prompts runs the prompts the line filter takes off the wire, on
	// goroutines kept from earlier prompts (prompt.go).
	prompts gopool.Cache

	mu       sync.Mutex
	sessions map[string]*actors.Session
	client   acp.ClientCapabilities
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

// NewSession creates a session actor for an existing, absolute cwd.
func (a *Agent) NewSession(_ context.Context, p acp.NewSessionRequest) (_ acp.NewSessionResponse, err error) {
	defer a.survive("session/new", &err)
	cwd, err := checkCwd(p.Cwd)
	if err != nil {
		return acp.NewSessionResponse{}, err
	}
	id := actors.NewSessionID(time.Now())
	rt := a.runtime()
	s := a.register(rt.SpawnSession(&actors.SessionState{ID: id, Cwd: cwd}))
	if a.cfg.Sessions.Enabled {
		// The session exists once its file does: a crash after this
		// response cannot lose it.
		if err := s.Flush(); err != nil {
			a.log.Error(fmt.Sprintf("[acp] session %s: saving: %v", id, err))
		}
	}
	// available_commands_update must follow the response: an editor drops
	// notifications for a session id it does not know yet.
	a.out.afterResponse(id, s.ResponseWritten)
	a.log.Info(fmt.Sprintf("[acp] session %s created in %s (%d MCP server(s) ignored)", id, cwd, len(p.McpServers)))
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

// Prompt runs one turn and answers when it has ended and its updates are
// written. Prompts read from the wire never get here: the line filter
// serves them (prompt.go). This is the acp.Agent method for a caller that
// drives the agent without the filter; such a prompt has no number, and
// only a cancel through Cancel covers it. Cancellation reaches the turn
// through Cancel, not through ctx: the SDK also cancels ctx when a second
// prompt for the session arrives, and that prompt must queue behind this
// one instead.
func (a *Agent) Prompt(_ context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	text := flatten(p.Prompt, s.Cwd, func(path string) {
		a.log.Info(fmt.Sprintf("[acp] session %s: attached %s", s.ID, path))
	})
	res := s.Prompt(0, text)
	if res.Err != "" {
		return acp.PromptResponse{}, acp.NewInternalError(map[string]any{"error": res.Err})
	}
	out := acp.PromptResponse{StopReason: res.StopReason, Usage: res.Usage}
	if res.Provenance.SessionID != "" {
		out.Meta = provenanceMeta(res.Provenance) // /new and /compact change it
	}
	return out, nil
}

// Cancel cancels the session's running and queued turns that reached the
// agent through the SDK (never numbered). The cancels read from the wire
// take the line filter's path instead: cancelSession.
func (a *Agent) Cancel(_ context.Context, p acp.CancelNotification) error {
	s, err := a.session(p.SessionId)
	if err != nil {
		return err
	}
	s.Cancel(0)
	return nil
}

// cancelSession cancels the session's turns numbered up to upTo, running or
// queued. A cancel is a notification: an unknown session is only logged.
func (a *Agent) cancelSession(sessionID string, upTo uint64) {
	s := a.live(sessionID)
	if s == nil {
		a.log.Warn(fmt.Sprintf("[acp] session/cancel: unknown session %q", sessionID))
		return
	}
	s.Cancel(upTo)
}

// Logout has nothing to end: mm needs no login.
func (a *Agent) Logout(context.Context, acp.LogoutRequest) (acp.LogoutResponse, error) {
	return acp.LogoutResponse{}, acp.NewMethodNotFound(acp.AgentMethodLogout)
}
