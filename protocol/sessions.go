package protocol

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// The session methods beyond session/new and session/prompt: load, resume,
// list, close, fork, modes and the model selector.

// capabilities advertises what works with this configuration.
func (a *Agent) capabilities() acp.AgentCapabilities {
	caps := acp.AgentCapabilities{
		// Pasted files are inlined; images reach a model that takes them.
		PromptCapabilities: acp.PromptCapabilities{EmbeddedContext: true, Image: a.cfg.Model.Vision},
		// MCP servers over stdio (always) and streamable HTTP.
		McpCapabilities: acp.McpCapabilities{Http: true},
		// logout answers: mm has nothing to end (Agent.Logout).
		Auth: acp.AgentAuthCapabilities{Logout: &acp.LogoutCapabilities{}},
		SessionCapabilities: acp.SessionCapabilities{
			// A session's other folders: its commands write them as its
			// cwd (workspace-write), inside the server's roots.
			AdditionalDirectories: &acp.SessionAdditionalDirectoriesCapabilities{},
			Close:                 &acp.SessionCloseCapabilities{},
			Fork:                  &acp.SessionForkCapabilities{},
		},
	}
	if a.reopens() {
		caps.LoadSession = true
		caps.SessionCapabilities.Resume = &acp.SessionResumeCapabilities{}
	}
	if a.cfg.Sessions.Enabled {
		caps.SessionCapabilities.List = &acp.SessionListCapabilities{}
		caps.SessionCapabilities.Delete = &acp.SessionDeleteCapabilities{}
	}
	return caps
}

// reopens says whether a session can be taken up again: from its file
// when sessions are saved, or, on a shared hub (mm serve), live from
// another connection of its owner, saved or not.
func (c *Caller) reopens() bool { return c.cfg.Sessions.Enabled || c.shared }

func provenanceMeta(p store.Provenance) map[string]any { return actors.ProvenanceMeta(p) }

// modes describes the session modes with the current one.
func modes(current string) *acp.SessionModeState {
	return &acp.SessionModeState{
		CurrentModeId: acp.SessionModeId(current),
		AvailableModes: []acp.SessionMode{
			{Id: actors.ModeAsk, Name: "Ask", Description: acp.Ptr("Ask before running commands and changing files")},
			{Id: actors.ModeYolo, Name: "Yolo", Description: acp.Ptr("Run commands and change files without asking (sensitive paths still ask)")},
		},
	}
}

// configOptions are the session's options: the model selector and, when
// its commands are confined, the sandbox's mode and network (a boolean
// for a client that announced session.configOptions.boolean, a select of
// on and off otherwise).
func (c *Caller) configOptions(current, sandbox string, network bool) []acp.SessionConfigOption {
	var opts acp.SessionConfigSelectOptionsUngrouped
	for _, m := range c.runtime().Models() {
		opts = append(opts, acp.SessionConfigSelectOption{Value: acp.SessionConfigValueId(m.ID), Name: m.Name})
	}
	out := []acp.SessionConfigOption{{Select: &acp.SessionConfigOptionSelect{
		Id:           "model",
		Name:         "Model",
		Category:     acp.Ptr(acp.SessionConfigOptionCategoryModel),
		CurrentValue: acp.SessionConfigValueId(current),
		Options:      acp.SessionConfigSelectOptions{Ungrouped: &opts},
		Type:         "select",
	}}}
	if modes := c.runtime().SandboxModes(); sandbox != "" && len(modes) > 0 {
		var sb acp.SessionConfigSelectOptionsUngrouped
		for _, m := range modes {
			sb = append(sb, acp.SessionConfigSelectOption{Value: acp.SessionConfigValueId(m), Name: m, Description: acp.Ptr(sandboxWords[m])})
		}
		out = append(out, acp.SessionConfigOption{Select: &acp.SessionConfigOptionSelect{
			Id:           "sandbox",
			Name:         "Sandbox",
			Description:  acp.Ptr("What the commands the agent runs may touch, whatever the mode"),
			CurrentValue: acp.SessionConfigValueId(sandbox),
			Options:      acp.SessionConfigSelectOptions{Ungrouped: &sb},
			Type:         "select",
		}})
		out = append(out, c.networkOption(network))
	}
	return out
}

// networkWords describe the network option.
const networkWords = "Whether the commands the agent runs reach the network"

// networkOption is the sandbox's network switch: a boolean when the
// client shows them, else a select of on and off. A client may turn it
// off, and on again only where sandbox.network lets commands reach it.
func (c *Caller) networkOption(on bool) acp.SessionConfigOption {
	if c.asks != nil && c.asks.Caps("").Has(actors.CapBoolOptions) {
		return acp.SessionConfigOption{Boolean: &acp.SessionConfigOptionBoolean{
			Id: "network", Name: "Network", Description: acp.Ptr(networkWords), CurrentValue: on, Type: "boolean",
		}}
	}
	values := acp.SessionConfigSelectOptionsUngrouped{{Value: "off", Name: "off"}}
	if c.runtime().Network() {
		values = append(values, acp.SessionConfigSelectOption{Value: "on", Name: "on"})
	}
	current := acp.SessionConfigValueId("off")
	if on {
		current = "on"
	}
	return acp.SessionConfigOption{Select: &acp.SessionConfigOptionSelect{
		Id: "network", Name: "Network", Description: acp.Ptr(networkWords), CurrentValue: current,
		Options: acp.SessionConfigSelectOptions{Ungrouped: &values}, Type: "select",
	}}
}

// sandboxWords describe the sandbox modes to the user (docs/sandbox.md).
var sandboxWords = map[string]string{
	"read-only":       "Commands read, and write nothing but their own /tmp",
	"workspace-write": "Commands write the session's folder and their own /tmp",
	"full":            "Commands write whatever mm's user may; hidden paths and the network switch still apply",
}

// sessionMeta is the _meta of a session's response: its provenance and,
// when its commands are confined, its sandbox (actors.SandboxKey).
func (c *Caller) sessionMeta(p store.Provenance, sandbox string, network bool) map[string]any {
	meta := provenanceMeta(p)
	for k, v := range c.runtime().SandboxMeta(sandbox, network) {
		meta[k] = v
	}
	return meta
}

// errShuttingDown refuses sessions once the connection is closing.
var errShuttingDown = jsonrpc.Internal("mm is shutting down", nil)

// openFile opens session id from its file in cwd: its actor starts at
// once, registered, and reads its state itself (once the actor of the
// work still done on the stored session is gone: a close, a delete,
// registry.Table.Latest), the session's requests
// waiting in its mailbox meanwhile. When it cannot be opened, the request
// r is answered why, and every later one of the session that it does not
// exist.
func (c *Caller) openFile(r actors.Reply, id, rawCwd string, dirs []string, servers []acp.McpServer, here *actors.Here) (*actors.Session, error) {
	cwd, err := c.checkCwd(rawCwd)
	if err != nil {
		return nil, err
	}
	c.know(cwd)
	open := func(s *actors.Session) (*actors.SessionState, any) {
		// The folders first: another token's is not even looked in.
		err := c.claimFolders(append([]string{cwd}, dirs...)...)
		var st *actors.SessionState
		if err == nil {
			st, err = c.loadFile(id, cwd)
		}
		if err != nil {
			c.hub.sessions.Forget(id, s)
			c.answer(id, r, nil, toRequestError(err))
			return nil, &edgeAnswer{err: unknownSession(id)}
		}
		c.hub.store.NoteFolder(cwd)
		st.MCP, st.Dirs = c.mcpServers(servers), dirs
		return c.attach(st), nil
	}
	mcp := c.mcpProcs(servers)
	if err := c.roomFor(mcp); err != nil {
		return nil, err
	}
	return c.register(c.runtime().OpenSession(id, cwd, c.on(), c.hub.sessions.Latest(id), open, here), mcp)
}

// loadFile reads stored session id of cwd as this connection may see it:
// a server's token sees only its own sessions, the others are not there.
func (c *Caller) loadFile(id, cwd string) (*actors.SessionState, error) {
	f, where, err := c.hub.store.Load(c.ctx, cwd, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &acp.RequestError{Code: codeNoSession, Message: "Resource not found: " + err.Error(),
			Data: map[string]any{"sessionId": id, "error": err.Error()}}
	}
	if err != nil {
		return nil, acp.NewInvalidParams(map[string]any{"sessionId": id, "error": err.Error()})
	}
	st := actors.StateFromFile(f, where, cwd)
	if !c.mayOpen(st) {
		return nil, unknownSession(id)
	}
	return st, nil
}

// mayOpen says whether this connection's token owns a stored session (a
// server's token sees only its own; mm -acp's user sees every one).
func (c *Caller) mayOpen(st *actors.SessionState) bool {
	return c.owner == "" || st.Owner == c.owner
}

// serveLoad replays a stored session, or re-attaches to a live one; the
// session answers behind its replay.
func (c *Caller) serveLoad(r actors.Reply, p acp.LoadSessionRequest, here *actors.Here) {
	dirs, err := c.checkDirs(p.AdditionalDirectories)
	if err != nil {
		c.answer(string(p.SessionId), r, nil, toRequestError(err))
		return
	}
	c.serveOpen(r, string(p.SessionId), p.Cwd, dirs, p.McpServers, func(s *actors.Session) { c.sent(s.ID, r, s.Replay(r, here)) }, here)
}

// serveResume is serveLoad without the replay.
func (c *Caller) serveResume(r actors.Reply, p acp.ResumeSessionRequest, here *actors.Here) {
	dirs, err := c.checkDirs(p.AdditionalDirectories)
	if err != nil {
		c.answer(string(p.SessionId), r, nil, toRequestError(err))
		return
	}
	c.serveOpen(r, string(p.SessionId), p.Cwd, dirs, p.McpServers, func(s *actors.Session) { c.sent(s.ID, r, s.Resume(r, here)) }, here)
}

// serveOpen serves a load or a resume in the session's order: a live
// session gets the request at once, moved here first when another
// connection of its owner holds it; a stored one is opened (openFile),
// and gets it in its mailbox, behind its opening. then hands the request
// to the session.
func (c *Caller) serveOpen(r actors.Reply, id, cwd string, dirs []string, servers []acp.McpServer, then func(s *actors.Session), here *actors.Here) {
	if !c.reopens() {
		c.answer(id, r, nil, acp.NewMethodNotFound(r.Method))
		return
	}
	if err := store.CheckID(id); err != nil {
		c.answer(id, r, nil, acp.NewInvalidParams(map[string]any{"sessionId": id, "error": err.Error()}))
		return
	}
	if s := c.live(id); s != nil {
		then(s)
		return
	}
	if c.hub.sessions.Taken(id, c.owner) {
		// Another token's session does not exist for this one.
		c.answer(id, r, nil, unknownSession(id))
		return
	}
	if s, from, _ := c.hub.sessions.Owned(id, c.owner); s != nil {
		// Live, held by another connection of its owner or by none: it
		// moves here, its turns there ending cancelled first.
		c.hub.sessions.Move(id, c)
		s.Move(c.connection(), from != nil, here)
		if from != nil {
			c.log.Info(fmt.Sprintf("[acp] session %s moved to this connection from another", id))
		}
		then(s)
		return
	}
	if !c.cfg.Sessions.Enabled {
		c.answer(id, r, nil, unknownSession(id))
		return
	}
	s, err := c.openFile(r, id, cwd, dirs, servers, here)
	if err != nil {
		c.answer(id, r, nil, toRequestError(err))
		return
	}
	then(s)
}

// ListSessions lists stored sessions, newest first: those of a cwd, or,
// without one (ACP makes cwd an optional filter), those of every folder mm
// has saved sessions in (the folder index), of the folders this connection
// has named, and of the live sessions. It is served by the SDK, unordered:
// it reads files, and names no session whose requests it could overtake.
func (a *Agent) ListSessions(_ context.Context, p acp.ListSessionsRequest) (_ acp.ListSessionsResponse, err error) {
	defer a.surviveSDK("session/list", &err)
	if !a.cfg.Sessions.Enabled {
		return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
	}
	var list []store.Summary
	var lerr error
	if p.Cwd != nil {
		if raw := tools.TranslatePath(*p.Cwd); filepath.IsAbs(raw) {
			if _, err := os.Stat(raw); errors.Is(err, fs.ErrNotExist) {
				// A folder that does not exist holds no session.
				return acp.ListSessionsResponse{Sessions: []acp.SessionInfo{}}, nil
			}
		}
		cwd, err := a.checkCwd(*p.Cwd)
		if err != nil {
			return acp.ListSessionsResponse{}, err
		}
		a.know(cwd)
		list, lerr = a.hub.store.List(a.ctx, cwd)
	} else {
		// The store knows its folders (the files' index; Postgres sees
		// every session); these are the ones it may not know yet.
		list, lerr = a.hub.store.ListAll(a.ctx, append(a.knownCwds(), a.hub.sessions.Cwds(a.owner)...))
	}
	if lerr != nil {
		return acp.ListSessionsResponse{}, a.internal("session/list", lerr)
	}
	all := make([]store.Summary, 0, len(list))
	for _, s := range list {
		// A server's token lists its own sessions (as the files claim;
		// loading one checks the claim).
		if a.owner == "" || s.Owner == a.owner {
			all = append(all, s)
		}
	}
	out := acp.ListSessionsResponse{Sessions: make([]acp.SessionInfo, 0, len(all))}
	for _, s := range all {
		info := acp.SessionInfo{SessionId: acp.SessionId(s.ID), Cwd: s.Cwd, UpdatedAt: acp.Ptr(s.Updated.UTC().Format(time.RFC3339))}
		if s.Title != "" {
			info.Title = acp.Ptr(s.Title)
		}
		out.Sessions = append(out.Sessions, info)
	}
	return out, nil
}

// serveClose ends a session after the requests read before the close:
// its turns are cancelled, the rest served, its actor freed once its file
// is final. The close is answered behind it, by an actor of its own
// (actors.Runtime.Behind), which what is done with the session next (a
// load, a delete) starts behind in turn.
func (c *Caller) serveClose(r actors.Reply, p acp.CloseSessionRequest, here *actors.Here) {
	id := string(p.SessionId)
	s := c.unregister(id)
	if s == nil {
		c.answer(id, r, nil, unknownSession(id))
		return
	}
	s.End(false, here) // in the session's order, now
	c.behind(id, s, r, func() {
		c.log.Info(fmt.Sprintf("[acp] session %s closed", id))
		c.answer(id, r, acp.CloseSessionResponse{}, nil)
	})
}

// behind does work on a session that is not live (any more), off the
// ingress, in an actor of its own: once the actor of s is gone, or with s
// nil, the actor of the work on the session before; what is done with it
// next starts behind this. r is the request it serves.
func (c *Caller) behind(id string, s *actors.Session, r actors.Reply, work func()) {
	c.hub.sessions.Behind(id, func(before *actors.Session) *actors.Session {
		if s != nil {
			before = s
		}
		return c.runtime().Behind(id, before, func() {
			defer c.survive(r.Method, r)
			work()
		})
	})
}

// serveSetMode switches between ask and yolo, in the session's order.
func (c *Caller) serveSetMode(r actors.Reply, p acp.SetSessionModeRequest, here *actors.Here) {
	id := string(p.SessionId)
	s := c.live(id)
	if s == nil {
		c.answer(id, r, nil, unknownSession(id))
		return
	}
	c.sent(id, r, s.SetMode(string(p.ModeId), r, here))
}

// serveSetConfig sets the model selector, in the session's order.
// serveSetModel serves the legacy session/set_model, which JetBrains AIR
// still sends: {sessionId, modelId} sets the session's model config option,
// as session/set_config_option with configId "model" does, and answers {}.
func (c *Caller) serveSetModel(r actors.Reply, p acpmethod.SetModelRequest, here *actors.Here) {
	id := string(p.SessionId)
	s := c.live(id)
	if s == nil {
		c.answer(id, r, nil, unknownSession(id))
		return
	}
	c.sent(id, r, s.SetModel(p.ModelId, r, here))
}

func (c *Caller) serveSetConfig(r actors.Reply, p acp.SetSessionConfigOptionRequest, here *actors.Here) {
	if b := p.Boolean; b != nil {
		id := string(b.SessionId)
		s := c.live(id)
		switch {
		case s == nil:
			c.answer(id, r, nil, unknownSession(id))
		case b.ConfigId == "network" && len(c.runtime().SandboxModes()) > 0:
			c.sent(id, r, s.SetNetwork(b.Value, r, here))
		default:
			c.answer(id, r, nil, acp.NewInvalidParams(map[string]any{"configId": string(b.ConfigId), "error": "no boolean option " + strconv.Quote(string(b.ConfigId)) + " (network, when commands are confined)"}))
		}
		return
	}
	v := p.ValueId
	if v == nil {
		c.answer("", r, nil, acp.NewInvalidParams(map[string]any{"error": "the option's value is neither a value id nor a boolean"}))
		return
	}
	id := string(v.SessionId)
	s := c.live(id)
	if s == nil {
		c.answer(id, r, nil, unknownSession(id))
		return
	}
	switch {
	case v.ConfigId == "model":
		c.sent(id, r, s.SetModel(string(v.Value), r, here))
	case v.ConfigId == "sandbox" && len(c.runtime().SandboxModes()) > 0:
		c.sent(id, r, s.SetSandbox(string(v.Value), r, here))
	case v.ConfigId == "network" && len(c.runtime().SandboxModes()) > 0 && (v.Value == "on" || v.Value == "off"):
		c.sent(id, r, s.SetNetwork(v.Value == "on", r, here))
	default:
		known := "model"
		if len(c.runtime().SandboxModes()) > 0 {
			known = "model, sandbox, network (on, off)"
		}
		c.answer(id, r, nil, acp.NewInvalidParams(map[string]any{"configId": string(v.ConfigId), "error": "unknown option (" + known + ")"}))
	}
}
