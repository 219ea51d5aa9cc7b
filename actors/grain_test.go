package actors

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/history"
)

// activation spawns what a cluster's activation would: an actor, with
// the session props, whose Receive is a Grain's from its start; it
// returns its PID and the Grain.
func activation(t *testing.T, rt *Runtime, id string) (*actor.PID, chan Grain) {
	t.Helper()
	made := make(chan Grain, 1)
	var g Grain
	pid := rt.sys.Root.Spawn(rt.SessionProps(func() actor.Actor {
		return actor.ReceiveFunc(func(ctx actor.Context) {
			if _, ok := ctx.Message().(*actor.Started); ok {
				g = rt.NewGrain(id, ctx.Self())
				made <- g
				return
			}
			g.Receive(ctx)
		})
	}))
	return pid, made
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
			pid, made := activation(t, rt, id)
			g := <-made
			if g.Bound() {
				t.Fatal("a grain has a session before one is given to it")
			}
			var s *Session
			if how == "made" {
				s = rt.SpawnSession(&SessionState{ID: id, Cwd: t.TempDir()}, Attachment{})
			} else {
				s = rt.OpenSession(id, t.TempDir(), Attachment{}, nil, func(*Session) (*SessionState, any) {
					return &SessionState{History: []history.Message{{Role: history.RoleUser, Content: "earlier"}}}, nil
				})
			}
			defer s.Stop()
			if !s.pid.Equal(pid) {
				t.Fatalf("the session runs in %v, its grain is %v", s.pid, pid)
			}
			turn := out.reply(acp.AgentMethodSessionPrompt)
			if _, err := s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, turn); err != nil {
				t.Fatal(err)
			}
			if res, ok := out.wait(t, turn).(*TurnResult); !ok || res.StopReason != acp.StopReasonEndTurn {
				t.Fatalf("a turn in the grain: %#v", res)
			}
			if !g.Bound() {
				t.Error("the grain does not know it has its session")
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
