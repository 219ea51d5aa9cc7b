package protocol

import (
	"errors"
	"fmt"
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

// serveDelete deletes a session in its order: a live one is closed like
// session/close and its file removed once any save in flight is written; a
// stored one is looked for in the folders this connection has named and in
// the folder index, as session/list showed it. A session that does not
// exist (or no longer does) is deleted already: the request succeeds, as
// ACP's session/delete says.
func (a *Agent) serveDelete(r actors.Reply, p acp.UnstableDeleteSessionRequest) {
	id := string(p.SessionId)
	if !a.cfg.Sessions.Enabled {
		a.answer(id, r, nil, acp.NewMethodNotFound(acp.AgentMethodSessionDelete))
		return
	}
	if err := store.CheckID(id); err != nil {
		a.answer(id, r, nil, acp.NewInvalidParams(map[string]any{"sessionId": id, "error": err.Error()}))
		return
	}
	if a.hub.sessions.Taken(id, a.owner) {
		// Another token's session does not exist for this one: it is
		// deleted already, as far as this token can tell.
		a.answer(id, r, acp.UnstableDeleteSessionResponse{}, nil)
		return
	}
	s, _ := a.hub.sessions.Remove(id, a.owner)
	var ended func() error
	if s != nil {
		ended = s.End(true) // in the session's order, now
	}
	a.end(id, func() {
		if ended != nil {
			err := ended()
			if err == nil {
				a.log.Info(fmt.Sprintf("[acp] session %s deleted (it was open: closed first)", id))
				a.answer(id, r, acp.UnstableDeleteSessionResponse{}, nil)
				return
			}
			if !errors.Is(err, actors.ErrNeverOpened) {
				a.answer(id, r, nil, a.internal("session/delete", err))
				return
			}
			// Its opening failed: there may be a file still.
		}
		if err := a.removeStored(id); err != nil {
			a.answer(id, r, nil, a.internal("session/delete", err))
			return
		}
		a.answer(id, r, acp.UnstableDeleteSessionResponse{}, nil)
	}, r)
}

// removeStored removes a session that is not open, wherever a known
// folder holds it (files) or wherever it is (Postgres); none is fine.
func (a *Agent) removeStored(id string) error {
	var spare func(*store.File, string, string) bool
	if a.owner != "" {
		spare = func(f *store.File, where, cwd string) bool {
			return !a.mayOpen(actors.StateFromFile(f, where, cwd)) // not this token's
		}
	}
	where, err := a.hub.store.Delete(a.ctx, id, append(a.knownCwds(), a.hub.store.Folders()...), spare)
	if err != nil {
		return err
	}
	if where == "" {
		a.log.Info(fmt.Sprintf("[acp] session %s: nothing to delete (no such session in the known folders)", id))
		return nil
	}
	a.log.Info(fmt.Sprintf("[acp] session %s deleted (%s)", id, where))
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
