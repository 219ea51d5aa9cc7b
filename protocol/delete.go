package protocol

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/store"
)

// know records a project folder the client named.
func (a *Agent) know(cwd string) {
	a.mu.Lock()
	a.cwds[cwd] = true
	a.mu.Unlock()
}

// UnstableDeleteSession serves session/delete (stable in ACP's current
// schema, unstable in acp-go-sdk v0.13.5): a live session is stopped like
// session/close and its file removed once any save in flight is written; a
// stored one is looked for in the folders this connection has named, as
// session/list showed it.
func (a *Agent) UnstableDeleteSession(_ context.Context, p acp.UnstableDeleteSessionRequest) (_ acp.UnstableDeleteSessionResponse, err error) {
	defer a.survive("session/delete", &err)
	if !a.cfg.Sessions.Enabled {
		return acp.UnstableDeleteSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionDelete)
	}
	id := string(p.SessionId)
	if err := store.CheckID(id); err != nil {
		return acp.UnstableDeleteSessionResponse{}, acp.NewInvalidParams(map[string]any{"sessionId": id, "error": err.Error()})
	}
	a.mu.Lock()
	s := a.sessions[id]
	delete(a.sessions, id)
	a.mu.Unlock()
	if s != nil {
		if err := s.Delete(); err != nil {
			return acp.UnstableDeleteSessionResponse{}, acp.NewInternalError(map[string]any{"sessionId": id, "error": err.Error()})
		}
		a.log.Info(fmt.Sprintf("[acp] session %s deleted (it was open: closed first)", id))
		return acp.UnstableDeleteSessionResponse{}, nil
	}
	for _, cwd := range a.knownCwds() {
		path := store.Path(cwd, a.cfg.Sessions.Dir, id)
		err := os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return acp.UnstableDeleteSessionResponse{}, acp.NewInternalError(map[string]any{"sessionId": id, "error": err.Error()})
		}
		a.log.Info(fmt.Sprintf("[acp] session %s deleted (%s)", id, path))
		return acp.UnstableDeleteSessionResponse{}, nil
	}
	return acp.UnstableDeleteSessionResponse{}, acp.NewInvalidParams(map[string]any{"sessionId": id,
		"error": "no such session in the folders this connection has used (session/list names them)"})
}

// knownCwds lists the known project folders, sorted.
func (a *Agent) knownCwds() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.cwds))
	for cwd := range a.cwds {
		out = append(out, cwd)
	}
	sort.Strings(out)
	return out
}
