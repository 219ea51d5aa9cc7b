package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/mcpclient"
	"github.com/mm-agent/mm/store"
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
	History    []history.Message
	Plan       []history.PlanEntry
	// MCP are the MCP servers the editor gave the session (not saved: a
	// load or a resume names them again).
	MCP []mcpclient.Server
	// Owner names the token of `mm serve` the session belongs to ("" for
	// mm -acp's); it is saved with the session. A state read from a file
	// has the owner the file names only when the file is trusted.
	Owner string
	// Roots are the folders mm's own file tools may open for the session
	// (mm serve's serve.roots, links followed); nil: any. Not saved: the
	// server that opens a session says them.
	Roots []string
	// Dirs are the session's additionalDirectories (ACP), checked as its
	// cwd is: its commands may write them as they write the cwd. Not
	// saved: a load or a resume names them again.
	Dirs []string
	// Rev is the stored revision the state was read at (store.File.Rev):
	// the session's saves are fenced on it. 0 for a new session.
	Rev int64
	// Untrusted, when set, says in one line why the file this state was
	// read from is not known to be one this user's mm wrote for this
	// folder. The session then takes from it nothing that widens what
	// runs unasked: its mode only when it is ask (which narrows it), the
	// configured mode otherwise. It tells the user so once, before its
	// commands are announced, and logs it. (Remembered permission answers
	// are never in a file: every loaded session starts without them. The
	// model is one of the configured ones or the default; the history,
	// plan and usage are the conversation the user chose to open, shown
	// by the replay.)
	Untrusted string
}

// StateFromFile turns a session read from path (a file's, or what the
// store calls it, store.Backend.Load), in the project folder cwd, into a
// state to spawn there. A session that is not signed with the user's key
// (store.File.Signed), or was signed for another folder, gives an
// Untrusted state.
func StateFromFile(f *store.File, path, cwd string) *SessionState {
	st := &SessionState{
		ID: f.ID, Cwd: cwd, Created: f.Created, Provenance: f.Provenance, Rev: f.Rev,
		Mode: f.Mode, Model: f.Model, Usage: f.Usage, History: f.History, Plan: f.Plan,
	}
	if f.Signed && f.Cwd == cwd {
		st.Owner = f.Owner
	}
	switch {
	case !f.Signed:
		st.Untrusted = path + " is not signed by your mm (written elsewhere, edited, or saved by an mm that did not sign its files)"
	case f.Cwd != cwd:
		st.Untrusted = path + " was signed for another folder, " + f.Cwd
	}
	if st.Untrusted != "" && st.Mode != "" && st.Mode != ModeAsk {
		st.Untrusted += "; the " + st.Mode + " mode it names is not taken"
		st.Mode = "" // the configured one
	}
	return st
}

// tellNotice says the session's notice to the client, once.
func (s *session) tellNotice() {
	if s.notice != "" {
		s.warn(Notice{Severity: "warning", Title: s.notice})
		s.notice = ""
	}
}

// encode marshals f, signed with the runtime's key, and warns once per
// session when the file grows past what a Reader will load again.
func (s *session) encode(f *store.File) ([]byte, error) {
	data, err := s.rt.key.Marshal(f)
	if err == nil && !s.warnedSize && int64(len(data)) > int64(s.rt.cfg.Sessions.MaxFileBytes) && s.rt.cfg.Sessions.MaxFileBytes > 0 {
		s.warnedSize = true
		s.rt.log.Warn(fmt.Sprintf("[acp] session %s: its file is %d MiB, more than sessions.maxFileBytes (%d MiB): session/load will refuse it until the limit is raised or the session compacted",
			s.id, len(data)>>20, s.rt.cfg.Sessions.MaxFileBytes>>20))
	}
	return data, err
}

// state copies the session's state (the history slice is copied; its
// messages are never mutated in place, so sharing them is safe).
func (s *session) state() *SessionState {
	return &SessionState{
		ID: s.id, Cwd: s.cwd, Created: s.created, Provenance: s.prov, Owner: s.owner,
		Mode: s.mode, Model: s.modelID, Usage: s.usage.store(),
		History: append([]history.Message(nil), s.history...), Plan: s.plan,
	}
}

func (s *session) file() *store.File {
	return &store.File{
		ID: s.id, Cwd: s.cwd, Created: s.created, Updated: time.Now(),
		Title: history.Title(s.history), Owner: s.owner, Provenance: s.prov,
		Mode: s.mode, Model: s.modelID, Usage: s.usage.store(), History: s.history, Plan: s.plan,
	}
}

// startPersistence opens the session's writer. The file is first written
// on Flush (session/new, fork) or after the first turn (load, resume).
func (s *session) startPersistence(ctx actor.Context) {
	if !s.rt.cfg.Sessions.Enabled {
		return
	}
	id, log := s.id, s.rt.log
	root, self := ctx.ActorSystem().Root, ctx.Self()
	s.writer = s.rt.store.Writer(s.cwd, s.id, s.rev, func(err error) {
		if errors.Is(err, store.ErrFenced) {
			// Sent before the save's done func runs: the session hears
			// it before the persisted that would release its reply.
			root.Send(self, &fenced{Err: err.Error()})
			return
		}
		log.Error(fmt.Sprintf("[acp] session %s: saving: %v", id, err))
	})
	// The writer's goroutine is counted so that the process exits only
	// once every file is flushed.
	w := s.writer
	s.rt.goWork(func() { <-w.Done() })
}

// onFenced stops a session whose save was fenced: another mm (another
// process, another node) took the session over since this one loaded it,
// and this copy must not go on as if its turns were kept. The prompt
// waiting for that save answers why, in one line; with none waiting, the
// session says it. The log says it too, with the store's reason.
func (s *session) onFenced(ctx actor.Context, m *fenced) {
	if s.fenced || s.closing {
		return
	}
	s.fenced = true
	why := s.fencedWhy()
	s.rt.log.Error(fmt.Sprintf("[acp] %s (%s)", why, m.Err))
	// The session ends before its user hears why: what the user sends
	// next finds no session (the edge's table takes an ended one for
	// gone) rather than this one stopping.
	s.handle.end()
	if h := s.held; h != nil {
		s.held, s.cur = nil, nil
		s.answer(h.answer, &TurnResult{Err: why})
	} else {
		s.say("\n⚠️ " + why + "\n")
	}
	s.onCancel(ctx, &CancelTurns{UpTo: ^uint64(0)})
	s.endItself(ctx)
}

func (s *session) fencedWhy() string {
	return fmt.Sprintf("session %s: another mm took this session over; this copy stopped", s.id)
}

// onFlush writes the session file now and answers once it is on disk. A
// fenced session writes nothing more: protoactor still hands a stopping
// actor the messages queued before its stop took effect, and such a flush
// was answered as saved (TestFencedSessionStops, under load).
func (s *session) onFlush(ctx actor.Context, m *Flush) {
	to := m.ReplyTo
	if s.fenced {
		ctx.Send(to, &Done{Err: s.fencedWhy()})
		return
	}
	if s.writer == nil {
		ctx.Send(to, &Done{})
		return
	}
	data, err := s.encode(s.file())
	if err != nil {
		ctx.Send(to, &Done{Err: err.Error()})
		return
	}
	id, root := s.id, ctx.ActorSystem().Root
	s.writer.Save(data, func(err error) {
		if err != nil {
			root.Send(to, &Done{Err: fmt.Sprintf("session %s could not be saved: %v", id, err)})
			return
		}
		root.Send(to, &Done{})
	})
}

// save queues the current state for the writer. With notify, the writer
// tells the actor (persisted) once the file holds it.
func (s *session) save(ctx actor.Context, notify bool) {
	if s.writer == nil || s.fenced {
		return
	}
	data, err := s.encode(s.file())
	if err != nil {
		s.rt.log.Error(fmt.Sprintf("[acp] session %s: encoding the session file: %v", s.id, err))
		if notify {
			ctx.Send(ctx.Self(), &persisted{Err: "encoding it: " + err.Error()})
		}
		return
	}
	var done func(error)
	if notify {
		root, self := ctx.ActorSystem().Root, ctx.Self()
		done = func(err error) {
			m := &persisted{}
			if err != nil {
				m.Err = err.Error()
			}
			root.Send(self, m)
		}
	}
	if k := s.keep; k != nil {
		// /new: the old conversation is stored before the session's
		// file forgets it, so a crash in between loses nothing.
		s.keep = nil
		w, log, st, cwd := s.writer, s.rt.log, s.rt.store, s.cwd
		s.rt.goWork(func() {
			if err := st.Create(context.Background(), cwd, k.id, k.data); err != nil {
				log.Error(fmt.Sprintf("[acp] saving the kept conversation %s: %v", k.id, err))
			}
			w.Save(data, done)
		})
		return
	}
	s.writer.Save(data, done)
}

// keepJob is a conversation /new keeps under a new id.
type keepJob struct {
	id   string
	data []byte
}

// stopPersistence closes the writer off the actor (closing waits for the
// last save to be on disk) and closes final once the file is final; for a
// deleted session, the file is removed once the writer is done. Then, when
// self is set (the session ends itself, closeUp), the actor is sent
// fileFinal, and stops: it is gone only once its file is final, so that
// what is done with the session next waits for its actor alone
// (Runtime.Behind). A nil self is an actor that stops already.
func (s *session) stopPersistence(self *actor.PID) {
	w, final := s.writer, s.final
	s.writer = nil
	root := s.rt.sys.Root
	done := func() {
		close(final)
		if self != nil {
			root.Send(self, &fileFinal{})
		}
	}
	if s.forget {
		s.removeFile(w, done)
		return
	}
	if w == nil {
		done()
		return
	}
	s.rt.goWork(func() {
		w.Close()
		done()
	})
}

// keepAs prepares the current conversation as a session file of its own,
// under a new id, for the next save to write first. It returns that id.
func (s *session) keepAs() string {
	f := s.file()
	f.ID = NewSessionID(time.Now())
	f.Provenance.SessionID = f.ID
	data, err := s.encode(f)
	if err != nil {
		s.rt.log.Error(fmt.Sprintf("[acp] session %s: encoding the kept conversation: %v", s.id, err))
		return ""
	}
	s.keep = &keepJob{id: f.ID, data: data}
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
