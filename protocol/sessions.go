package protocol

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/store"
)

// The session methods beyond session/new and session/prompt: load, resume,
// list, close, fork, modes and the model selector.

var _ acp.AgentLoader = (*Agent)(nil)

// capabilities advertises what works with this configuration.
func (a *Agent) capabilities() acp.AgentCapabilities {
	caps := acp.AgentCapabilities{
		// Pasted files are inlined; images reach a model that takes them.
		PromptCapabilities: acp.PromptCapabilities{EmbeddedContext: true, Image: a.cfg.Model.Vision},
		// MCP servers over stdio (always) and streamable HTTP.
		McpCapabilities: acp.McpCapabilities{Http: true},
		SessionCapabilities: acp.SessionCapabilities{
			Close: &acp.SessionCloseCapabilities{},
			Fork:  &acp.SessionForkCapabilities{},
		},
	}
	if a.cfg.Sessions.Enabled {
		caps.LoadSession = true
		caps.SessionCapabilities.List = &acp.SessionListCapabilities{}
		caps.SessionCapabilities.Resume = &acp.SessionResumeCapabilities{}
		caps.SessionCapabilities.Delete = &acp.SessionDeleteCapabilities{}
	}
	return caps
}

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

// configOptions is the model selector.
func (a *Agent) configOptions(current string) []acp.SessionConfigOption {
	var opts acp.SessionConfigSelectOptionsUngrouped
	for _, m := range a.runtime().Models() {
		opts = append(opts, acp.SessionConfigSelectOption{Value: acp.SessionConfigValueId(m.ID), Name: m.Name})
	}
	return []acp.SessionConfigOption{{Select: &acp.SessionConfigOptionSelect{
		Id:           "model",
		Name:         "Model",
		Category:     acp.Ptr(acp.SessionConfigOptionCategoryModel),
		CurrentValue: acp.SessionConfigValueId(current),
		Options:      acp.SessionConfigSelectOptions{Ungrouped: &opts},
		Type:         "select",
	}}}
}

// errShuttingDown refuses sessions once the connection is closing.
var errShuttingDown = acp.NewInternalError(map[string]any{"error": "mm is shutting down"})

// register adds a live session and returns it; once the connection is
// closing, the session is stopped and refused.
func (a *Agent) register(s *actors.Session) (*actors.Session, error) {
	a.mu.Lock()
	closed := a.closed
	if !closed {
		a.sessions[s.ID] = s
	}
	a.mu.Unlock()
	if closed {
		s.Stop()
		return nil, errShuttingDown
	}
	return s, nil
}

func (a *Agent) live(id string) *actors.Session {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[id]
}

// open returns the live session id, or spawns it from its file.
func (a *Agent) open(id acp.SessionId, rawCwd string, servers []acp.McpServer) (*actors.Session, bool, error) {
	if s := a.live(string(id)); s != nil {
		return s, true, nil
	}
	cwd, err := checkCwd(rawCwd)
	if err != nil {
		return nil, false, err
	}
	a.know(cwd)
	if err := store.CheckID(string(id)); err != nil {
		return nil, false, acp.NewInvalidParams(map[string]any{"sessionId": string(id), "error": err.Error()})
	}
	f, err := store.Load(store.Path(cwd, a.cfg.Sessions.Dir, string(id)))
	if err == nil && f.ID != string(id) {
		err = fmt.Errorf("%w: the file holds session %q", store.ErrCorrupt, f.ID)
	}
	if err != nil {
		return nil, false, acp.NewInvalidParams(map[string]any{"sessionId": string(id), "error": err.Error()})
	}
	st := actors.StateFromFile(f)
	st.Cwd = cwd
	st.MCP = a.mcpServers(servers)
	rt := a.runtime()
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[string(id)]; s != nil { // loaded meanwhile
		return s, true, nil
	}
	if a.closed {
		return nil, false, errShuttingDown
	}
	s := rt.SpawnSession(st)
	a.sessions[s.ID] = s
	return s, false, nil
}

// LoadSession replays a stored session, or re-attaches to a live one.
func (a *Agent) LoadSession(_ context.Context, p acp.LoadSessionRequest) (_ acp.LoadSessionResponse, err error) {
	defer a.survive("session/load", &err)
	if !a.cfg.Sessions.Enabled {
		return acp.LoadSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionLoad)
	}
	s, _, err := a.open(p.SessionId, p.Cwd, p.McpServers)
	if err != nil {
		return acp.LoadSessionResponse{}, err
	}
	r := s.Replay()
	a.log.Info(fmt.Sprintf("[acp] session %s loaded from %s: %d message(s) replayed", s.ID, a.cfg.Sessions.Dir, r.Messages))
	st, err := s.State()
	if err != nil {
		return acp.LoadSessionResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	return acp.LoadSessionResponse{Meta: provenanceMeta(r.Provenance), Modes: modes(st.Mode), ConfigOptions: a.configOptions(st.Model)}, nil
}

// ResumeSession is load without the replay.
func (a *Agent) ResumeSession(_ context.Context, p acp.ResumeSessionRequest) (_ acp.ResumeSessionResponse, err error) {
	defer a.survive("session/resume", &err)
	if !a.cfg.Sessions.Enabled {
		return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
	}
	s, attached, err := a.open(p.SessionId, p.Cwd, p.McpServers)
	if err != nil {
		return acp.ResumeSessionResponse{}, err
	}
	st, err := s.State()
	if err != nil {
		return acp.ResumeSessionResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	if !attached {
		// The response carries no session id, so the commands can follow
		// right away: the client named the session itself.
		s.Announce()
	}
	a.log.Info(fmt.Sprintf("[acp] session %s resumed (%d message(s))", s.ID, len(st.History)-1))
	return acp.ResumeSessionResponse{Meta: provenanceMeta(st.Provenance), Modes: modes(st.Mode), ConfigOptions: a.configOptions(st.Model)}, nil
}

// ListSessions lists the stored sessions of a cwd (or of the cwds of the
// live sessions), newest first.
func (a *Agent) ListSessions(_ context.Context, p acp.ListSessionsRequest) (_ acp.ListSessionsResponse, err error) {
	defer a.survive("session/list", &err)
	if !a.cfg.Sessions.Enabled {
		return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
	}
	var cwds []string
	if p.Cwd != nil {
		cwd, err := checkCwd(*p.Cwd)
		if err != nil {
			return acp.ListSessionsResponse{}, err
		}
		a.know(cwd)
		cwds = []string{cwd}
	} else {
		seen := map[string]bool{}
		a.mu.Lock()
		for _, s := range a.sessions {
			if !seen[s.Cwd] {
				seen[s.Cwd] = true
				cwds = append(cwds, s.Cwd)
			}
		}
		a.mu.Unlock()
	}
	var all []store.Summary
	for _, cwd := range cwds {
		list, err := store.List(cwd, a.cfg.Sessions.Dir)
		if err != nil {
			return acp.ListSessionsResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
		}
		all = append(all, list...)
	}
	sortSummaries(all)
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

// CloseSession cancels the session's work, flushes its file and frees its
// actor.
func (a *Agent) CloseSession(_ context.Context, p acp.CloseSessionRequest) (_ acp.CloseSessionResponse, err error) {
	defer a.survive("session/close", &err)
	s, err := a.session(p.SessionId)
	if err != nil {
		return acp.CloseSessionResponse{}, err
	}
	a.mu.Lock()
	delete(a.sessions, s.ID)
	a.mu.Unlock()
	s.Stop()
	a.log.Info(fmt.Sprintf("[acp] session %s closed", s.ID))
	return acp.CloseSessionResponse{}, nil
}

// UnstableForkSession starts a new session with a copy of another's
// history; its provenance points at the parent.
func (a *Agent) UnstableForkSession(_ context.Context, p acp.UnstableForkSessionRequest) (_ acp.UnstableForkSessionResponse, err error) {
	defer a.survive("session/fork", &err)
	var st *actors.SessionState
	if src := a.live(string(p.SessionId)); src != nil {
		var err error
		if st, err = src.State(); err != nil {
			return acp.UnstableForkSessionResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
		}
	} else if a.cfg.Sessions.Enabled {
		cwd, err := checkCwd(p.Cwd)
		if err != nil {
			return acp.UnstableForkSessionResponse{}, err
		}
		if err := store.CheckID(string(p.SessionId)); err != nil {
			return acp.UnstableForkSessionResponse{}, acp.NewInvalidParams(map[string]any{"sessionId": string(p.SessionId), "error": err.Error()})
		}
		f, err := store.Load(store.Path(cwd, a.cfg.Sessions.Dir, string(p.SessionId)))
		if err != nil {
			return acp.UnstableForkSessionResponse{}, acp.NewInvalidParams(map[string]any{"sessionId": string(p.SessionId), "error": err.Error()})
		}
		st = actors.StateFromFile(f)
	} else {
		_, err := a.session(p.SessionId)
		return acp.UnstableForkSessionResponse{}, err
	}
	cwd, err := checkCwd(p.Cwd)
	if err != nil {
		return acp.UnstableForkSessionResponse{}, err
	}
	a.know(cwd)
	parent := st.ID
	st.ID, st.Cwd, st.Created = actors.NewSessionID(time.Now()), cwd, time.Time{}
	st.Provenance = store.Provenance{SessionID: st.ID, ParentSessionID: parent, Kind: "fork", CompressionDepth: st.Provenance.CompressionDepth}
	st.MCP = a.mcpServers(stableServers(p.McpServers))
	s, err := a.register(a.runtime().SpawnSession(st))
	if err != nil {
		return acp.UnstableForkSessionResponse{}, err
	}
	if err := s.Flush(); err != nil {
		a.log.Error(fmt.Sprintf("[acp] session %s: saving: %v", s.ID, err))
	}
	// The caller queues the response, then Announce (serveCreation).
	a.log.Info(fmt.Sprintf("[acp] session %s forked from %s (%d message(s))", s.ID, parent, len(st.History)-1))
	return acp.UnstableForkSessionResponse{SessionId: acp.SessionId(s.ID), Meta: provenanceMeta(st.Provenance), Modes: modes(st.Mode)}, nil
}

// SetSessionMode switches between ask and yolo.
func (a *Agent) SetSessionMode(_ context.Context, p acp.SetSessionModeRequest) (_ acp.SetSessionModeResponse, err error) {
	defer a.survive("session/set_mode", &err)
	s, err := a.session(p.SessionId)
	if err != nil {
		return acp.SetSessionModeResponse{}, err
	}
	if err := s.SetMode(string(p.ModeId)); err != nil {
		return acp.SetSessionModeResponse{}, acp.NewInvalidParams(map[string]any{"modeId": string(p.ModeId), "error": err.Error()})
	}
	return acp.SetSessionModeResponse{}, nil
}

// SetSessionConfigOption sets the model selector.
func (a *Agent) SetSessionConfigOption(_ context.Context, p acp.SetSessionConfigOptionRequest) (_ acp.SetSessionConfigOptionResponse, err error) {
	defer a.survive("session/set_config_option", &err)
	v := p.ValueId
	if v == nil {
		return acp.SetSessionConfigOptionResponse{}, acp.NewInvalidParams(map[string]any{"error": "only the model selector (a value id) can be set"})
	}
	s, err := a.session(v.SessionId)
	if err != nil {
		return acp.SetSessionConfigOptionResponse{}, err
	}
	if v.ConfigId != "model" {
		return acp.SetSessionConfigOptionResponse{}, acp.NewInvalidParams(map[string]any{"configId": string(v.ConfigId), "error": "unknown option (model)"})
	}
	if err := s.SetModel(string(v.Value)); err != nil {
		return acp.SetSessionConfigOptionResponse{}, acp.NewInvalidParams(map[string]any{"value": string(v.Value), "error": err.Error()})
	}
	return acp.SetSessionConfigOptionResponse{ConfigOptions: a.configOptions(string(v.Value))}, nil
}

// sortSummaries puts the newest first (ties: id descending), across cwds.
func sortSummaries(s []store.Summary) {
	sort.Slice(s, func(i, j int) bool {
		if !s[i].Updated.Equal(s[j].Updated) {
			return s[i].Updated.After(s[j].Updated)
		}
		return s[i].ID > s[j].ID
	})
}

// survive turns a panic in a request handler into an internal error for
// that request: the SDK runs handlers without a recover, and one bad
// request must not end every session.
func (a *Agent) survive(method string, err *error) {
	if r := recover(); r != nil {
		a.log.Error(fmt.Sprintf("[acp] %s panicked: %v", method, r))
		*err = acp.NewInternalError(map[string]any{"error": fmt.Sprintf("mm failed: %v", r)})
	}
}

// stableServers reads the unstable fork request's MCP servers as the
// stable type they share their JSON with.
func stableServers(in []acp.UnstableMcpServer) []acp.McpServer {
	var out []acp.McpServer
	if b, err := json.Marshal(in); err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}
