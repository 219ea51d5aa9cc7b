package protocol

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/store"
)

// know records a project folder the client named.
func (a *Agent) know(cwd string) {
	a.mu.Lock()
	a.cwds[cwd] = true
	a.mu.Unlock()
}

// UnstableDeleteSession serves session/delete (stable in ACP's current
// schema, unstable in acp-go-sdk v0.13.5) for a caller that serves the
// Agent itself; the ingress serves it with serveDelete.
func (a *Agent) UnstableDeleteSession(_ context.Context, p acp.UnstableDeleteSessionRequest) (acp.UnstableDeleteSessionResponse, error) {
	return call[acp.UnstableDeleteSessionResponse](a, acp.AgentMethodSessionDelete, func(r *actors.Reply) { a.serveDelete(r, p) })
}

// serveDelete deletes a session in its order: a live one is closed like
// session/close and its file removed once any save in flight is written; a
// stored one is looked for in the folders this connection has named and in
// the folder index, as session/list showed it. A session that does not
// exist (or no longer does) is deleted already: the request succeeds, as
// ACP's session/delete says.
func (a *Agent) serveDelete(r *actors.Reply, p acp.UnstableDeleteSessionRequest) {
	id := string(p.SessionId)
	if !a.cfg.Sessions.Enabled {
		a.answer(id, r, nil, acp.NewMethodNotFound(acp.AgentMethodSessionDelete))
		return
	}
	if err := store.CheckID(id); err != nil {
		a.answer(id, r, nil, acp.NewInvalidParams(map[string]any{"sessionId": id, "error": err.Error()}))
		return
	}
	a.inOrder(id, func() {
		if a.hub.taken(id, a.owner) {
			// Another token's session does not exist for this one: it is
			// deleted already, as far as this token can tell.
			a.answer(id, r, acp.UnstableDeleteSessionResponse{}, nil)
			return
		}
		s := a.hub.remove(id, a.owner)
		a.hold(id)
		go func() {
			defer a.release(id)
			defer a.survive("session/delete", r)
			if s != nil {
				if err := s.Delete(); err != nil {
					a.answer(id, r, nil, a.internal("session/delete", err))
					return
				}
				a.log.Info(fmt.Sprintf("[acp] session %s deleted (it was open: closed first)", id))
				a.answer(id, r, acp.UnstableDeleteSessionResponse{}, nil)
				return
			}
			if err := a.removeStored(id); err != nil {
				a.answer(id, r, nil, a.internal("session/delete", err))
				return
			}
			a.answer(id, r, acp.UnstableDeleteSessionResponse{}, nil)
		}()
	})
}

// removeStored removes the file of a session that is not open, wherever a
// known folder holds it; none is fine.
func (a *Agent) removeStored(id string) error {
	seen := map[string]bool{}
	for _, cwd := range append(a.knownCwds(), a.hub.folders.List(a.cfg.Sessions.Dir)...) {
		if seen[cwd] {
			continue
		}
		seen[cwd] = true
		path := store.Path(cwd, a.cfg.Sessions.Dir, id)
		if a.owner != "" {
			if _, err := a.loadFile(id, cwd); err != nil {
				continue // not there, or not this token's
			}
		}
		err := os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		a.log.Info(fmt.Sprintf("[acp] session %s deleted (%s)", id, path))
		return nil
	}
	a.log.Info(fmt.Sprintf("[acp] session %s: nothing to delete (no such session in the known folders)", id))
	return nil
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
