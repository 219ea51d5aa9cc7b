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
func (c *Caller) know(cwd string) {
	c.mu.Lock()
	c.cwds[cwd] = true
	c.mu.Unlock()
}

// serveDelete deletes a session in its order: a live one is closed like
// session/close and its file removed once any save in flight is written; a
// stored one is looked for in the folders this connection has named and in
// the folder index, as session/list showed it. A session that does not
// exist (or no longer does) is deleted already: the request succeeds, as
// ACP's session/delete says.
func (c *Caller) serveDelete(r actors.Reply, p acp.UnstableDeleteSessionRequest, here *actors.Here) {
	id := string(p.SessionId)
	if !c.cfg.Sessions.Enabled {
		c.answer(id, r, nil, acp.NewMethodNotFound(acp.AgentMethodSessionDelete))
		return
	}
	if err := store.CheckID(id); err != nil {
		c.answer(id, r, nil, acp.NewInvalidParams(map[string]any{"sessionId": id, "error": err.Error()}))
		return
	}
	if c.hub.sessions.Taken(id, c.owner) {
		// Another token's session does not exist for this one: it is
		// deleted already, as far as this token can tell.
		c.answer(id, r, acp.UnstableDeleteSessionResponse{}, nil)
		return
	}
	s, _ := c.hub.sessions.Remove(id, c.owner)
	var ended func() error
	if s != nil {
		ended = s.End(true, here) // in the session's order, now
	}
	c.behind(id, s, r, func() {
		if ended != nil {
			// Its actor is gone: this returns at once.
			err := ended()
			if err == nil {
				c.log.Info(fmt.Sprintf("[acp] session %s deleted (it was open: closed first)", id))
				c.answer(id, r, acp.UnstableDeleteSessionResponse{}, nil)
				return
			}
			if !errors.Is(err, actors.ErrNeverOpened) {
				c.answer(id, r, nil, c.internal("session/delete", err))
				return
			}
			// Its opening failed: there may be a file still.
		}
		if err := c.removeStored(id); err != nil {
			c.answer(id, r, nil, c.internal("session/delete", err))
			return
		}
		c.answer(id, r, acp.UnstableDeleteSessionResponse{}, nil)
	})
}

// removeStored removes a session that is not open, wherever a known
// folder holds it (files) or wherever it is (Postgres); none is fine.
func (c *Caller) removeStored(id string) error {
	var spare func(*store.File, string, string) bool
	if c.owner != "" {
		spare = func(f *store.File, where, cwd string) bool {
			return !c.mayOpen(actors.StateFromFile(f, where, cwd)) // not this token's
		}
	}
	where, err := c.hub.store.Delete(c.ctx, id, append(c.knownCwds(), c.hub.store.Folders()...), spare)
	if err != nil {
		return err
	}
	if where == "" {
		c.log.Info(fmt.Sprintf("[acp] session %s: nothing to delete (no such session in the known folders)", id))
		return nil
	}
	c.log.Info(fmt.Sprintf("[acp] session %s deleted (%s)", id, where))
	return nil
}

// knownCwds lists the known project folders, sorted.
func (c *Caller) knownCwds() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.cwds))
	for cwd := range c.cwds {
		out = append(out, cwd)
	}
	sort.Strings(out)
	return out
}
