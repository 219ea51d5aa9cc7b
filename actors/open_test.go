package actors

import (
	"fmt"
	"github.com/mm-agent/mm/jsonrpc"
	"runtime"

	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/testwait"
)

const pongScript = `
rules:
  - match: "^ping$"
    steps:
      - {text: "pong"}
`

// TestOpeningKeepsWhatComes: a session opening (its state not read yet)
// keeps what it is sent and serves it, in order, once open: the mode set,
// then the prompt run in it, on the history it opened with.
func TestOpeningKeepsWhatComes(t *testing.T) {
	rt, out := newTestRuntime(t, pongScript)
	release, before := heldBehind(rt)
	cwd := t.TempDir()
	s := rt.OpenSession("s1", cwd, Attachment{}, before, func(*Session) (*SessionState, any) {
		return &SessionState{History: []history.Message{{Role: history.RoleUser, Content: "earlier"}, {Role: history.RoleAssistant, Content: "yes"}}}, nil
	}, nil)
	defer s.Stop()
	mode := out.reply(acp.AgentMethodSessionSetMode)
	s.SetMode(ModeAsk, mode, nil)
	turn := out.reply(acp.AgentMethodSessionPrompt)
	s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, turn, nil)
	time.Sleep(50 * time.Millisecond)
	if out.answeredYet(mode) {
		t.Fatal("answered before the session opened")
	}
	close(release)
	if o, ok := out.wait(t, mode).(*Outcome); !ok || o.Err != "" || o.Mode != ModeAsk {
		t.Fatalf("the mode set while opening: %#v", o)
	}
	if res, ok := out.wait(t, turn).(*TurnResult); !ok || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the prompt sent while opening: %#v", res)
	}
	st, err := s.State()
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != "s1" || st.Cwd != cwd || st.Mode != ModeAsk || len(st.History) != 5 || st.History[1].Content != "earlier" {
		t.Fatalf("opened state: id %s cwd %s mode %s, %d messages", st.ID, st.Cwd, st.Mode, len(st.History))
	}
}

// TestFailedOpeningAnswersEverything: a session whose opening fails stops;
// what it was sent meanwhile, and what it is sent after, gets the answer
// its opening gave, and a state request is refused.
func TestFailedOpeningAnswersEverything(t *testing.T) {
	rt, out := newTestRuntime(t, pongScript)
	release, before := heldBehind(rt)
	gone := &Outcome{Err: "no such session"}
	s := rt.OpenSession("s1", t.TempDir(), Attachment{}, before, func(*Session) (*SessionState, any) { return nil, gone }, nil)
	early := out.reply(acp.AgentMethodSessionPrompt)
	s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, early, nil)
	close(release)
	if v := out.wait(t, early); v != gone {
		t.Fatalf("a prompt sent while opening: %#v", v)
	}
	// What is sent after the failure gets the failure too: from the
	// session, while it still takes what its handle sends, else from the
	// handle, for its server to answer; never from both.
	late := out.reply(acp.AgentMethodSessionSetMode)
	if v := s.SetMode(ModeYolo, late, nil); v == nil {
		if v := out.wait(t, late); v != gone {
			t.Fatalf("a mode sent after the failure: %#v", v)
		}
	} else if v != gone || out.answeredYet(late) {
		t.Fatalf("a mode sent after the failure, refused: %#v (answered too: %v)", v, out.answeredYet(late))
	}
	<-s.gone
	if v := s.SetMode(ModeYolo, out.reply(acp.AgentMethodSessionSetMode), nil); v != gone {
		t.Fatalf("a mode sent once the session is gone: %#v", v)
	}
	if _, err := s.State(); err == nil {
		t.Fatal("a session that never opened has a state")
	}
	if err := s.End(true, nil)(); err != ErrNeverOpened {
		t.Fatalf("ending a session that never opened: %v", err)
	}
}

// TestStopWhileOpening: a session stopped before its state comes stops
// (its file final at once: it had none), and answers what it was sent.
func TestStopWhileOpening(t *testing.T) {
	rt, out := newTestRuntime(t, pongScript)
	release, before := heldBehind(rt)
	defer close(release)
	s := rt.OpenSession("s1", t.TempDir(), Attachment{}, before, func(*Session) (*SessionState, any) { return &SessionState{}, nil }, nil)
	turn := out.reply(acp.AgentMethodSessionPrompt)
	s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, turn, nil)
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(testwait.Hang):
		t.Fatal("Stop waited for the opening")
	}
	if res, ok := out.wait(t, turn).(*TurnResult); !ok || res.StopReason != acp.StopReasonCancelled {
		t.Fatalf("the prompt of a session stopped while opening: %#v", res)
	}
}

// TestMoveWaitsForTheTurns: a session taken over by another connection
// while a turn runs moves once that turn has ended (cancelled, answered on
// the first connection), and what it is sent after the move waits until
// then: the mode is answered after the turn, to the second connection.
func TestMoveWaitsForTheTurns(t *testing.T) {
	rt, first := newTestRuntime(t, `
rules:
  - match: "^sleep$"
    steps: [{text: "partial", stall: true}]
`)
	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	defer s.Stop()
	turn := NewReply(jsonrpc.IntID(1), acp.AgentMethodSessionPrompt)
	s.Start([]acp.ContentBlock{acp.TextBlock("sleep")}, turn, nil)
	waitUntil(t, func() bool {
		first.mu.Lock()
		defer first.mu.Unlock()
		return len(first.updates) > 0
	})
	second := &recOutbox{rt: rt}
	mode := second.reply(acp.AgentMethodSessionSetMode)
	s.Move(rt.Connect(Attachment{Out: second}), true, nil)
	s.SetMode(ModeAsk, mode, nil)
	if o, ok := second.wait(t, mode).(*Outcome); !ok || o.Mode != ModeAsk {
		t.Fatalf("the mode after the move: %#v", o)
	}
	got := first.answered()
	if len(got) != 1 || got[0].res == nil || got[0].res.StopReason != acp.StopReasonCancelled {
		t.Fatalf("the first connection's turn, when the mode was answered: %+v", got)
	}
	second.mu.Lock()
	defer second.mu.Unlock()
	if len(second.updates) != 1 || second.updates[0].CurrentModeUpdate == nil || len(second.answers) != 0 {
		t.Fatalf("the second connection heard %d update(s) and %d answer(s), want the mode's update alone", len(second.updates), len(second.answers))
	}
	first.mu.Lock()
	defer first.mu.Unlock()
	for _, u := range first.updates {
		if u.CurrentModeUpdate != nil {
			t.Fatal("the mode set after the move was told to the first connection")
		}
	}
}

func waitUntil(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("the condition never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEndWaitsForWhatCameBefore: a session ended while it opens, or while
// it moves, first serves what it was sent before the end: the end is one
// more message in its order, not a stop that overtakes what it keeps.
func TestEndWaitsForWhatCameBefore(t *testing.T) {
	rt, out := newTestRuntime(t, `
rules:
  - match: "^sleep$"
    steps: [{text: "partial", stall: true}]
`)
	release, before := heldBehind(rt)
	s := rt.OpenSession("s1", t.TempDir(), Attachment{}, before, func(*Session) (*SessionState, any) { return &SessionState{}, nil }, nil)
	mode := out.reply(acp.AgentMethodSessionSetMode)
	s.SetMode(ModeAsk, mode, nil)
	ended := s.End(false, nil)
	close(release)
	if o, ok := out.wait(t, mode).(*Outcome); !ok || o.Err != "" || o.Mode != ModeAsk {
		t.Fatalf("a mode sent before the end of an opening session: %#v", o)
	}
	if err := ended(); err != nil {
		t.Fatal(err)
	}

	// The same while the session moves: its turn there ends first, then
	// the mode sent after the move, then the end.
	m := rt.SpawnSession(&SessionState{ID: "s2", Cwd: t.TempDir()}, Attachment{})
	m.Start([]acp.ContentBlock{acp.TextBlock("sleep")}, NewReply(jsonrpc.IntID(1), acp.AgentMethodSessionPrompt), nil)
	waitUntil(t, func() bool {
		out.mu.Lock()
		defer out.mu.Unlock()
		return len(out.updates) > 0
	})
	second := &recOutbox{rt: rt}
	mode = second.reply(acp.AgentMethodSessionSetMode)
	m.Move(rt.Connect(Attachment{Out: second}), true, nil)
	m.SetMode(ModeAsk, mode, nil)
	ended = m.End(false, nil)
	if o, ok := second.wait(t, mode).(*Outcome); !ok || o.Err != "" || o.Mode != ModeAsk {
		t.Fatalf("a mode sent after the move and before the end: %#v", o)
	}
	if err := ended(); err != nil {
		t.Fatal(err)
	}
}

// TestKeptCancelsAreOne: cancels of every prompt in a row, kept while a
// session opens or moves, are kept as the last one; a cancel of one
// prompt, and what comes between, are kept as they are.
func TestKeptCancelsAreOne(t *testing.T) {
	var kept []any
	for i := range 1000 {
		kept = keep(kept, &CancelTurns{UpTo: uint64(i)})
	}
	if len(kept) != 1 || kept[0].(*CancelTurns).UpTo != 999 {
		t.Fatalf("1,000 cancels kept as %d, the last up to %v", len(kept), kept[0])
	}
	kept = keep(kept, &CancelTurns{UpTo: 3, Only: true})
	kept = keep(kept, &Announce{})
	kept = keep(kept, &CancelTurns{UpTo: 1000})
	if len(kept) != 4 {
		t.Fatalf("kept %d messages, want 4", len(kept))
	}
}

// TestPoisonedSessionAnswersWhatItTook: a session the cluster poisons (its
// grain's identity moved, its node leaves) ends in its order, and answers
// what it took: what it kept while opening, closed; a request sent after
// the end is answered by the handle, closed too.
func TestPoisonedSessionAnswersWhatItTook(t *testing.T) {
	rt, out := newTestRuntime(t, pongScript)
	release, before := heldBehind(rt)
	defer close(release)
	s := rt.OpenSession("s1", t.TempDir(), Attachment{}, before, func(*Session) (*SessionState, any) { return &SessionState{}, nil }, nil)
	mode := out.reply(acp.AgentMethodSessionSetMode)
	s.SetMode(ModeAsk, mode, nil)
	turn := out.reply(acp.AgentMethodSessionPrompt)
	s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, turn, nil)
	if err := rt.sys.Root.PoisonFuture(s.pid).Wait(); err != nil {
		t.Fatal(err)
	}
	if res, ok := out.wait(t, turn).(*TurnResult); !ok || res.StopReason != acp.StopReasonCancelled {
		t.Fatalf("the prompt kept while opening: %#v", res)
	}
	if o, ok := out.wait(t, mode).(*Outcome); !ok || o.Err != ErrSessionClosed.Error() {
		t.Fatalf("the mode kept while opening: %#v", o)
	}
	after := out.reply(acp.AgentMethodSessionSetMode)
	if o, ok := s.SetMode(ModeAsk, after, nil).(*Outcome); !ok || o.Err != ErrSessionClosed.Error() {
		t.Fatalf("a request sent after the end: %#v", o)
	}
	select {
	case <-s.gone:
	case <-time.After(testwait.Hang):
		t.Fatal("the poisoned session's handle does not know it is gone")
	}
}

// TestAttachNamesTheConnection: an Attach carries a connection's number,
// looked up as the session takes it. A connection that closed before
// (Disconnect) is none: the session is detached, and what it says goes
// to no one, not to the closed connection; a live one hears it.
func TestAttachNamesTheConnection(t *testing.T) {
	rt, first := newTestRuntime(t, "rules: []\n")
	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	defer s.Stop()
	closed := &recOutbox{rt: rt}
	gone := rt.Connect(Attachment{Out: closed})
	rt.Disconnect(gone)
	s.Move(gone, false, nil)
	lost := closed.reply(acp.AgentMethodSessionSetMode)
	s.SetMode(ModeAsk, lost, nil)
	third := &recOutbox{rt: rt}
	s.Move(rt.Connect(Attachment{Out: third}), false, nil)
	heard := third.reply(acp.AgentMethodSessionSetMode)
	s.SetMode(ModeYolo, heard, nil)
	if o, ok := third.wait(t, heard).(*Outcome); !ok || o.Mode != ModeYolo {
		t.Fatalf("the mode, on the live connection: %#v", o)
	}
	for _, o := range []*recOutbox{closed, first} {
		o.mu.Lock()
		n, m := len(o.updates), len(o.answers)
		o.mu.Unlock()
		if n != 0 || m != 0 {
			t.Fatalf("a connection the session had left heard %d update(s) and %d answer(s)", n, m)
		}
	}
}

// heldBehind is the actor of a work on a session that goes on until release
// is closed: a session opened behind it (OpenSession) waits for it.
func heldBehind(rt *Runtime) (release chan struct{}, before *Session) {
	release = make(chan struct{})
	return release, rt.Behind("s0", nil, func() { <-release })
}

// TestFailedOpeningAnswersInOrder: what a session whose opening failed
// was sent is answered in the order it was sent, also when a request comes
// just as the opening fails: the handle refuses a request itself only once
// every one it sent before has its answer (TestFailedOpenAnswersWhatFollows,
// through an edge, found a set_mode answered before the load it followed).
func TestFailedOpeningAnswersInOrder(t *testing.T) {
	rt, out := newTestRuntime(t, pongScript)
	gone := &Outcome{Err: "no such session"}
	for i := range 200 {
		proceed := make(chan struct{})
		s := rt.OpenSession(fmt.Sprintf("s%d", i), t.TempDir(), Attachment{}, nil, func(*Session) (*SessionState, any) {
			<-proceed
			return nil, gone
		}, nil)
		early := out.reply(acp.AgentMethodSessionLoad)
		if v := s.Replay(early, nil); v != nil {
			t.Fatalf("a load sent while opening was refused: %#v", v)
		}
		close(proceed)
		for deadline := time.Now().Add(testwait.Hang); !s.NeverOpened(); runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatal("the opening never failed")
			}
		}
		late := out.reply(acp.AgentMethodSessionSetMode)
		refused := s.SetMode(ModeAsk, late, nil)
		if refused != nil && !out.answeredYet(early) {
			t.Fatalf("round %d: the handle refused a mode before the load sent ahead of it had its answer", i)
		}
		if v := out.wait(t, early); v != gone {
			t.Fatalf("the load: %#v", v)
		}
		if refused == nil {
			if v := out.wait(t, late); v != gone {
				t.Fatalf("the mode: %#v", v)
			}
		} else if refused != gone {
			t.Fatalf("the mode, refused: %#v", refused)
		}
		if err := s.End(false, nil)(); err != ErrNeverOpened {
			t.Fatalf("ending it: %v", err)
		}
	}
}
