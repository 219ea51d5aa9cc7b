package actors

import (
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

func (c testCalls) Identity(actor.Context) string          { return c.id }
func (c testCalls) Takes(any) bool                         { return false }
func (c testCalls) Serve(actor.Context, string, *any, any) {}

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
				})
			}
			defer s.Stop()
			if !s.pid.Equal(pid) {
				t.Fatalf("the session runs in %v, its grain is %v", s.pid, pid)
			}
			turn := out.reply(acp.AgentMethodSessionPrompt)
			s.Start([]acp.ContentBlock{acp.TextBlock("ping")}, turn)
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
