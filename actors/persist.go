package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/mcpclient"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// SessionState is what a session is made of: enough to spawn it again from
// its file, or to fork it.
type SessionState struct {
	ID         string
	Cwd        string
	Created    time.Time
	Provenance store.Provenance
	Mode       string
	Model      string
	Usage      store.Usage
	History    []llm.Message
	Plan       []tools.PlanEntry
	// MCP are the MCP servers the editor gave the session (not saved: a
	// load or a resume names them again).
	MCP []mcpclient.Server
}

// StateFromFile turns a loaded session file into a state to spawn.
func StateFromFile(f *store.File) *SessionState {
	return &SessionState{
		ID: f.ID, Cwd: f.Cwd, Created: f.Created, Provenance: f.Provenance,
		Mode: f.Mode, Model: f.Model, Usage: f.Usage, History: f.History, Plan: f.Plan,
	}
}

// state copies the session's state (the history slice is copied; its
// messages are never mutated in place, so sharing them is safe).
func (s *session) state() *SessionState {
	return &SessionState{
		ID: s.id, Cwd: s.cwd, Created: s.created, Provenance: s.prov,
		Mode: s.mode, Model: s.modelID, Usage: s.usage.store(),
		History: append([]llm.Message(nil), s.history...), Plan: s.plan,
	}
}

func (s *session) file() *store.File {
	return &store.File{
		ID: s.id, Cwd: s.cwd, Created: s.created, Updated: time.Now(),
		Title: store.TitleOf(s.history), Provenance: s.prov,
		Mode: s.mode, Model: s.modelID, Usage: s.usage.store(), History: s.history, Plan: s.plan,
	}
}

// startPersistence opens the session's writer. The file is first written
// on Flush (session/new, fork) or after the first turn (load, resume).
func (s *session) startPersistence(ctx actor.Context) {
	if !s.rt.cfg.Sessions.Enabled {
		return
	}
	path := store.Path(s.cwd, s.rt.cfg.Sessions.Dir, s.id)
	id := s.id
	s.writer = store.NewWriter(path, func(err error) {
		s.rt.log.Error(fmt.Sprintf("[acp] session %s: saving %s: %v", id, path, err))
	})
	// The writer's goroutine is counted so that the process exits only
	// once every file is flushed.
	w := s.writer
	s.rt.goWork(func() { <-w.Done() })
}

// onFlush writes the session file now and answers once it is on disk.
func (s *session) onFlush(ctx actor.Context) {
	to := ctx.Sender()
	if s.writer == nil || to == nil {
		ctx.Respond(&Done{})
		return
	}
	data, err := store.Marshal(s.file())
	if err != nil {
		ctx.Respond(&Done{Err: err.Error()})
		return
	}
	root := ctx.ActorSystem().Root
	s.writer.Save(data, func() { root.Send(to, &Done{}) })
}

// save queues the current state for the writer. With notify, the writer
// tells the actor (persisted) once the file holds it.
func (s *session) save(ctx actor.Context, notify bool) {
	if s.writer == nil {
		return
	}
	data, err := store.Marshal(s.file())
	if err != nil {
		s.rt.log.Error(fmt.Sprintf("[acp] session %s: encoding the session file: %v", s.id, err))
		if notify {
			ctx.Send(ctx.Self(), &persisted{})
		}
		return
	}
	var done func()
	if notify {
		root, self := ctx.ActorSystem().Root, ctx.Self()
		done = func() { root.Send(self, &persisted{}) }
	}
	if k := s.keep; k != nil {
		// /new: the old conversation goes to disk before the session's
		// file forgets it, so a crash in between loses nothing.
		s.keep = nil
		w, log := s.writer, s.rt.log
		s.rt.goWork(func() {
			if err := store.WriteAtomic(k.path, k.data); err != nil {
				log.Error(fmt.Sprintf("[acp] saving %s: %v", k.path, err))
			}
			w.Save(data, done)
		})
		return
	}
	s.writer.Save(data, done)
}

// keepJob is a conversation /new keeps under a new id.
type keepJob struct {
	path string
	data []byte
}

// stopPersistence closes the writer off the actor (closing waits for the
// last save to be on disk) and closes final once the file is final; for a
// deleted session, the file is removed once the writer is done.
func (s *session) stopPersistence() {
	w, final := s.writer, s.final
	s.writer = nil
	if s.forget {
		s.removeFile(w, final)
		return
	}
	if w == nil {
		close(final)
		return
	}
	s.rt.goWork(func() {
		w.Close()
		close(final)
	})
}

// keepAs prepares the current conversation as a session file of its own,
// under a new id, for the next save to write first. It returns that id.
func (s *session) keepAs() string {
	f := s.file()
	f.ID = NewSessionID(time.Now())
	f.Provenance.SessionID = f.ID
	data, err := store.Marshal(f)
	if err != nil {
		s.rt.log.Error(fmt.Sprintf("[acp] session %s: encoding the kept conversation: %v", s.id, err))
		return ""
	}
	s.keep = &keepJob{path: store.Path(s.cwd, s.rt.cfg.Sessions.Dir, f.ID), data: data}
	return f.ID
}

func usageFromStore(u store.Usage) usageTotals {
	return usageTotals{
		reported: u.Reported, input: u.Input, output: u.Output, thought: u.Thought, cachedRead: u.CachedRead,
		thoughtReported: u.ThoughtReported, cachedReadReported: u.CachedReadReported,
	}
}

func (u *usageTotals) store() store.Usage {
	return store.Usage{
		Reported: u.reported, Input: u.input, Output: u.output, Thought: u.thought, CachedRead: u.cachedRead,
		ThoughtReported: u.thoughtReported, CachedReadReported: u.cachedReadReported,
	}
}
