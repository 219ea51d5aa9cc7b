package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/store"
)

// session/fork: a new session with a copy of another's history.

// serveForkAs starts a new session with a copy of another's history, as
// the requests read before the fork left it, with the new session's id
// chosen by the caller (a cluster's edge); "" makes one. Its provenance
// points at the parent.
func (c *Caller) serveForkAs(r actors.Reply, p acp.UnstableForkSessionRequest, id string, here *actors.Here) {
	parent := string(p.SessionId)
	switch src, _, _ := c.hub.sessions.Owned(parent, c.owner); {
	case c.hub.sessions.Taken(parent, c.owner):
		c.answer(parent, r, nil, unknownSession(parent))
	case src != nil:
		state := src.RequestState(here) // in the parent's order, now
		c.create(r, func() (string, any, error) {
			defer c.survive("session/fork", r)
			st, err := state()
			if err != nil {
				return "", nil, err
			}
			return c.fork(st, p, id, false)
		})
	case !c.cfg.Sessions.Enabled:
		c.answer(parent, r, nil, unknownSession(parent))
	default:
		// The stored parent is read by an actor of its own, behind the
		// work on it before (a close) and before what is done with it
		// next (a delete, behind the read in turn); the fork is made
		// from what it read. It counts as a creation from now on.
		run := c.creation(r)
		if run == nil {
			return
		}
		c.behind(parent, nil, r, func() {
			var st *actors.SessionState
			err := errors.New("mm failed reading the parent session")
			// Deferred, so that a read that panics still ends the
			// creation it counts.
			defer func() {
				go run(func() (string, any, error) {
					defer c.survive("session/fork", r)
					if err != nil {
						return "", nil, err
					}
					return c.fork(st, p, id, true)
				})
			}()
			st, err = c.readParent(parent, p)
		})
	}
}

// readParent reads the stored parent of fork request p, once the fork's
// folders are claimed for the caller's token: another token's is not even
// looked in.
func (c *Caller) readParent(parent string, p acp.UnstableForkSessionRequest) (*actors.SessionState, error) {
	cwd, err := c.checkCwd(p.Cwd)
	if err != nil {
		return nil, err
	}
	dirs, err := c.checkDirs(p.AdditionalDirectories)
	if err != nil {
		return nil, err
	}
	if err := c.claimFolders(append([]string{cwd}, dirs...)...); err != nil {
		return nil, err
	}
	if err := store.CheckID(parent); err != nil {
		return nil, acp.NewInvalidParams(map[string]any{"sessionId": parent, "error": err.Error()})
	}
	return c.loadFile(parent, cwd)
}

// fork spawns the copy of st a fork request asks for, in its cwd and
// additional directories, claimed for the caller's token unless claimed
// already.
func (c *Caller) fork(st *actors.SessionState, p acp.UnstableForkSessionRequest, id string, claimed bool) (string, any, error) {
	cwd, err := c.checkCwd(p.Cwd)
	if err != nil {
		return "", nil, err
	}
	dirs, err := c.checkDirs(p.AdditionalDirectories)
	if err != nil {
		return "", nil, err
	}
	if !claimed {
		if err := c.claimFolders(append([]string{cwd}, dirs...)...); err != nil {
			return "", nil, err
		}
	}
	c.know(cwd)
	parent := st.ID
	st.Owner = c.owner
	if id == "" {
		id = actors.NewSessionID(time.Now())
	}
	st.ID, st.Cwd, st.Dirs, st.Created, st.Rev = id, cwd, dirs, time.Time{}, 0
	st.Provenance = store.Provenance{SessionID: st.ID, ParentSessionID: parent, Kind: "fork", CompressionDepth: st.Provenance.CompressionDepth}
	servers := stableServers(p.McpServers)
	mcp := c.mcpProcs(servers)
	if err := c.roomFor(mcp); err != nil {
		return "", nil, err
	}
	st.MCP = c.mcpServers(servers)
	s, err := c.register(c.runtime().SpawnSession(c.attach(st), c.on()), mcp)
	if err != nil {
		return "", nil, err
	}
	if err := s.Flush(); err != nil {
		c.log.Error(fmt.Sprintf("[acp] session %s: saving: %v", s.ID, err))
	}
	if c.cfg.Sessions.Enabled {
		c.hub.store.NoteFolder(cwd)
	}
	c.log.Info(fmt.Sprintf("[acp] session %s forked from %s (%d message(s))", s.ID, parent, len(st.History)-1))
	mode := st.Mode
	if mode == "" {
		// A stored parent that named no mode, or one it may not set
		// (actors.SessionState.Untrusted): the session runs in the
		// configured one.
		mode = c.runtime().DefaultMode()
	}
	return s.ID, acp.UnstableForkSessionResponse{SessionId: acp.SessionId(s.ID), Meta: provenanceMeta(st.Provenance), Modes: modes(mode)}, nil
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
