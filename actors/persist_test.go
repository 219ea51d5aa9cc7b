package actors

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/store"
)

// hookStore is a file store whose writers save nothing: each save calls
// save with the session's id and the save's number for its writer (1 for
// the first), and fails as it does.
type hookStore struct {
	*store.FileStore
	save func(id string, n int32) error
}

func (f *hookStore) Writer(_, id string, _ int64, onError func(error)) *store.Writer {
	var n atomic.Int32
	return store.StartWriter(func([]byte) error { return f.save(id, n.Add(1)) }, onError)
}

// TestFencedSessionStops: a session whose save is fenced (another mm took
// it over) stops by itself: the prompt waiting for that save answers why,
// in one line, once the session has ended (the edge's table takes it
// for gone); later requests are
// answered at once, as a closed session's are, and nothing more is saved.
func TestFencedSessionStops(t *testing.T) {
	cfg := configs.Default()
	cfg.Sessions.Enabled = true
	model, err := llm.New(llm.Config{Provider: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	// Its writers refuse every save after the first, as Postgres does
	// once another mm saved the session.
	var saves atomic.Int32
	st := &hookStore{FileStore: store.NewFileStore(cfg.Sessions.Dir, nil, nil, nil), save: func(id string, n int32) error {
		saves.Add(1)
		if n > 1 {
			return fmt.Errorf("save session %s in postgres: %w", id, store.ErrFenced)
		}
		return nil
	}}
	out := &recOutbox{}
	rt := NewRuntime(Options{Config: cfg, Model: model, Out: out, Store: st})
	out.rt = rt
	t.Cleanup(rt.Shutdown)

	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	defer s.Stop()
	if err := s.Flush(); err != nil { // session/new's save: accepted
		t.Fatal(err)
	}
	var endedFirst atomic.Bool
	out.mu.Lock()
	out.answering = func(any) {
		// The first answer is the prompt's, from the actor: the handle's
		// lock is free (the handle answers later ones under it).
		endedFirst.Store(s.Ended())
		out.answering = nil
	}
	out.mu.Unlock()
	res := ask(s, "ping") // its save is fenced
	const want = "session s1: another mm took this session over; this copy stopped"
	if res.Err != want {
		t.Fatalf("turn = %+v, want the error %q", res, want)
	}
	// It ended before its user heard why: the edge's table, which asks
	// the handle, finds no session for what the user sends next.
	if !endedFirst.Load() {
		t.Fatal("the fenced session's user heard why before it ended")
	}
	// The handle answers at once now: a prompt ends cancelled, a flush
	// is refused, and nothing more reaches the store.
	before := saves.Load()
	done := make(chan *TurnResult, 1)
	go func() { done <- ask(s, "ping") }()
	select {
	case r := <-done:
		if r.StopReason != acp.StopReasonCancelled {
			t.Errorf("a prompt after the stop: %+v", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("a prompt sent after the stop was never answered")
	}
	if err := s.Flush(); err == nil {
		t.Error("a flush after the stop succeeded")
	}
	if n := saves.Load(); n != before || n != 2 {
		t.Errorf("%d saves, then %d; want 2: the new session's and the fenced one", before, n)
	}
}

// gateOutbox holds the session inside its Receive: its first Update waits
// until release is closed.
type gateOutbox struct {
	*recOutbox
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (o *gateOutbox) Update(id string, u acp.SessionUpdate) {
	o.once.Do(func() {
		close(o.entered)
		<-o.release
	})
	o.recOutbox.Update(id, u)
}

// TestStoppedSessionAnswersWhatItNeverRead: protoactor drops the messages
// left in a mailbox when its actor stops; the edge's requests among them
// (a state, a flush, a settle) are answered closed rather than waited for
// for ever. Found as a 30-minute hang of TestFencedSessionStops in CI: a
// flush sent as the fenced session stopped was never answered.
func TestStoppedSessionAnswersWhatItNeverRead(t *testing.T) {
	model, err := llm.New(llm.Config{Provider: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	out := &gateOutbox{recOutbox: &recOutbox{}, entered: make(chan struct{}), release: make(chan struct{})}
	rt := NewRuntime(Options{Config: configs.Default(), Model: model, Out: out})
	out.rt = rt
	t.Cleanup(rt.Shutdown)

	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	mode := out.reply(acp.AgentMethodSessionSetMode)
	s.SetMode("yolo", mode, nil) // its current_mode_update holds the actor
	select {
	case <-out.entered:
	case <-time.After(testwait.Hang):
		t.Fatal("the session never said its mode")
	}
	// Queued behind the held message: a state request, then the stop,
	// which protoactor handles first (a system message) and so drops the
	// request.
	state := s.RequestState(nil)
	stop := rt.sys.Root.StopFuture(s.pid)
	close(out.release)
	_ = stop.Wait()

	waits := map[string]func() error{
		"state": func() error { _, err := state(); return err },
		"flush": s.Flush,
		"settle": func() error {
			s.Settle()
			return ErrSessionClosed
		},
	}
	for name, wait := range waits {
		done := make(chan error, 1)
		go func() { done <- wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s of a stopped session succeeded", name)
			}
		case <-time.After(testwait.Hang):
			t.Fatalf("%s of a session stopped before it read it was never answered", name)
		}
	}
	s.Stop()
}

// TestCallsLeaveNoReply: a call's answer goes to a reply process of its
// own (reply.go), which is gone once the call is answered, whether the
// caller waited or not, and once a stopped session's call is answered
// closed. (A call never waited for that a stopping session dropped stays:
// protoactor drops what is left in a stopped actor's mailbox.)
func TestCallsLeaveNoReply(t *testing.T) {
	rt, _ := newTestRuntime(t, pongScript)
	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	for range 3 {
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.State(); err != nil {
			t.Fatal(err)
		}
		s.Settle()
	}
	_ = s.RequestState(nil) // never waited for, answered before the Settle
	s.Settle()
	s.Stop()
	if _, err := s.State(); err == nil {
		t.Error("a stopped session's state was given")
	}
	n := 0
	for _, bucket := range rt.sys.ProcessRegistry.LocalPIDs.LocalPIDs {
		for _, id := range bucket.Keys() {
			if strings.HasPrefix(id, "reply") {
				n++
			}
		}
	}
	if n > 0 {
		t.Errorf("%d reply processes left in the registry", n)
	}
}
