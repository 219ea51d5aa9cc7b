package actors

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/testwait"
)

// testCalls are a cluster's calls as a test activation has them: the
// session's id, and nothing else to serve.
type testCalls struct{ id string }

func (c testCalls) Identity(actor.Context) string                 { return c.id }
func (c testCalls) Takes(any) bool                                { return false }
func (c testCalls) Serve(actor.Context, string, *any, any, *Here) {}

// activation spawns what a cluster's activation would: a session's actor
// with the grain props, waiting for its session; it returns its PID once
// it waits.
func activation(t *testing.T, rt *Runtime, id string) *actor.PID {
	t.Helper()
	pid := rt.sys.Root.Spawn(rt.GrainProps(testCalls{id}))
	deadline := time.Now().Add(testwait.Hang)
	for !grainWaits(rt, id, pid) {
		if time.Now().After(deadline) {
			t.Fatal("the activation does not wait for its session")
		}
		time.Sleep(time.Millisecond)
	}
	return pid
}

// grainWaits says whether the grain pid waits for session id.
func grainWaits(rt *Runtime, id string, pid *actor.PID) bool {
	rt.grains.mu.Lock()
	defer rt.grains.mu.Unlock()
	p := rt.grains.m[id]
	return p != nil && p.Equal(pid)
}

// TestSessionIsItsGrain: a session made (SpawnSession) or opened
// (OpenSession) for an id whose grain a cluster activated runs in that
// grain's actor, no other: the handle's messages reach the activation,
// and a turn runs there. A session whose id no grain waits for is spawned
// as before.
func TestSessionIsItsGrain(t *testing.T) {
	rt, out := newTestRuntime(t, pongScript)
	for _, how := range []string{"made", "opened"} {
		t.Run(how, func(t *testing.T) {
			id := "grain-" + how
			pid := activation(t, rt, id)
			var s *Session
			if how == "made" {
				s = rt.SpawnSession(&SessionState{ID: id, Cwd: t.TempDir()}, Attachment{})
			} else {
				s = rt.OpenSession(id, t.TempDir(), Attachment{}, nil, func(*Session) (*SessionState, any) {
					return &SessionState{History: []history.Message{{Role: history.RoleUser, Content: "earlier"}}}, nil
				}, nil)
			}
			defer s.Stop()
			if !s.pid.Equal(pid) {
				t.Fatalf("the session runs in %v, its grain is %v", s.pid, pid)
			}
			turn := out.reply(acp.AgentMethodSessionPrompt)
			s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, turn, nil)
			if res, ok := out.wait(t, turn).(*TurnResult); !ok || res.StopReason != acp.StopReasonEndTurn {
				t.Fatalf("a turn in the grain: %#v", res)
			}
			if rt.grains.take(id) != nil {
				t.Error("a grain given its session still waits for one")
			}
		})
	}
	alone := rt.SpawnSession(&SessionState{ID: "no-grain", Cwd: t.TempDir()}, Attachment{})
	defer alone.Stop()
	if alone.pid == nil {
		t.Fatal("a session no grain waits for is not spawned")
	}
}

// TestMadeGrainTakesOneMessage: a session made (session/new, a fork) for
// a grain a cluster activated reaches that grain in one message, its
// handle and its state together: beside the cluster's call, one trip
// through the mailbox, as a load's state is.
func TestMadeGrainTakesOneMessage(t *testing.T) {
	rt, out := newTestRuntime(t, pongScript)
	var mu sync.Mutex
	var took []string
	count := func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			switch env.Message.(type) {
			case *given, *opened:
				mu.Lock()
				took = append(took, fmt.Sprintf("%T", env.Message))
				mu.Unlock()
			}
			next(c, env)
		}
	}
	id := "made-once"
	pid := rt.sys.Root.Spawn(rt.GrainProps(testCalls{id}).Configure(actor.WithReceiverMiddleware(count)))
	waitUntil(t, func() bool { return grainWaits(rt, id, pid) })
	s := rt.SpawnSession(&SessionState{ID: id, Cwd: t.TempDir()}, Attachment{})
	defer s.Stop()
	turn := out.reply(acp.AgentMethodSessionPrompt)
	s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, turn, nil)
	if res, ok := out.wait(t, turn).(*TurnResult); !ok || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a turn in the made grain: %#v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(took) != 1 || took[0] != "*actors.given" {
		t.Fatalf("the grain took %v to have its session, want one *actors.given", took)
	}
}

// TestHereTakesOnce: a prompt, a cancel or a mode a cluster's call makes of
// the session whose actor serves it (Here) are taken there and then, not sent
// through its mailbox again; a Here of another actor (the session opened
// again elsewhere since) does not take them, and they go to the session;
// nor does it take a prompt while a message its handle sent through the
// mailbox is on its way, which the prompt must come behind.
func TestHereTakesOnce(t *testing.T) {
	rt, out := newTestRuntime(t, pongScript)
	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	defer s.Stop()
	var took []any
	received := s.sent.Load() // the actor took all its handle sent
	here := &Here{pid: s.pid, take: func(m any) { took = append(took, m) }, received: &received}
	turn := out.reply(acp.AgentMethodSessionPrompt)
	seq, _ := s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, turn, here)
	s.Cancel(here)
	s.SetMode(ModeYolo, out.reply(acp.AgentMethodSessionSetMode), here)
	if len(took) != 3 {
		t.Fatalf("here took %d messages, want the prompt, the cancel and the mode", len(took))
	}
	if m, ok := took[2].(*SetMode); !ok || m.Mode != ModeYolo {
		t.Errorf("here took %#v third, want the mode", took[2])
	}
	if m, ok := took[0].(*StartTurn); !ok || m.Seq != seq || m.Seq != 1 {
		t.Errorf("here took %#v first, want prompt 1", took[0])
	}
	if m, ok := took[1].(*CancelTurns); !ok || m.UpTo != seq {
		t.Errorf("here took %#v second, want a cancel up to prompt %d", took[1], seq)
	}
	s.Settle()
	if out.answeredYet(turn) {
		t.Fatal("the prompt taken here reached the session's mailbox too")
	}
	// A message its handle sent is on its way (a mode set before the
	// call): the prompt goes behind it, through the mailbox.
	mode := out.reply(acp.AgentMethodSessionSetMode)
	s.SetMode(ModeAsk, mode, nil)
	behind := out.reply(acp.AgentMethodSessionPrompt)
	s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, behind, here)
	if len(took) != 3 {
		t.Fatalf("here took %T ahead of the mode its handle sent before", took[len(took)-1])
	}
	out.wait(t, mode)
	if res, ok := out.wait(t, behind).(*TurnResult); !ok || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a prompt behind a mode on its way: %#v", res)
	}
	// Another actor's Here: the session is sent its prompt.
	elsewhere := &Here{pid: actor.NewPID("nonhost", "other"), take: func(m any) { t.Errorf("another actor's Here took %T", m) }, received: &received}
	turn2 := out.reply(acp.AgentMethodSessionPrompt)
	s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, turn2, elsewhere)
	if res, ok := out.wait(t, turn2).(*TurnResult); !ok || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a prompt past another actor's Here: %#v", res)
	}
}
