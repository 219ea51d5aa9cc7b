package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/store"
)

// infoUpdate tells the client, after a turn, what changed of the session's
// title (the first user line, as session/list shows it) and of when it was
// last active, to the second: session_info_update. Turns that end within
// the same second as the last told one, with the same title, send nothing.
func (s *session) infoUpdate() {
	var u acp.SessionSessionInfoUpdate
	if at := time.Now().UTC().Format(time.RFC3339); at != s.updatedAt {
		s.updatedAt = at
		u.UpdatedAt = acp.Ptr(at)
	}
	if title := history.Title(s.history); title != s.title {
		s.title = title
		if title != "" { // the SDK's type cannot say null; an emptied title waits for the next one
			u.Title = acp.Ptr(title)
		}
	}
	if u.UpdatedAt != nil || u.Title != nil {
		s.out.Update(s.id, acp.SessionUpdate{SessionInfoUpdate: &u})
	}
}

// Forget makes the session remove its file when it stops (session/delete);
// the reply is a *Done. The session's final channel is closed once the file
// is gone (or there was none to remove).
type Forget struct{ ReplyTo *actor.PID }

func (s *session) onForget(ctx actor.Context, m *Forget) {
	s.forget = true
	ctx.Send(m.ReplyTo, &Done{})
}

// removeFile deletes the stored session once its writer w (nil: none) is
// done, off the actor: a save still queued would otherwise bring it back,
// and waiting for it is disk or database work. The file is final when it
// is gone: removed is called then.
func (s *session) removeFile(w *store.Writer, removed func()) {
	id, cwd, log, st := s.id, s.cwd, s.rt.log, s.rt.store
	s.rt.goWork(func() {
		defer removed()
		if w != nil {
			w.Close()
		}
		if _, err := st.Delete(context.Background(), id, []string{cwd}, nil); err != nil {
			log.Error(fmt.Sprintf("[acp] session %s: deleting: %v", id, err))
		}
	})
}
