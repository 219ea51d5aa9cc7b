package protocol_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/protocol"
)

const fairScript = `
rules:
  - match: "^nap$"
    steps: [{text: "rested", latency: 700ms}]
  - match: "^ping$"
    steps: [{text: "pong"}]
`

// TestTurnsGoRoundTheTenants: with one turn slot (turns.concurrency 1,
// the default) on a server two tokens share, one tenant's three slow
// prompts, in three sessions, do not keep the other tenant's ping behind
// all of them (issue 28: it waited for every one, 60 s): the slot goes to
// the tenant served least lately, so the ping runs next after the slow
// turn that holds the slot, before the first tenant's other two.
func TestTurnsGoRoundTheTenants(t *testing.T) {
	e := newHubEnvScript(t, fairScript, nil)
	srv, hub, ctx := e.server, e.hub, e.ctx
	connect := func(owner string) *acptest.Conn {
		c := acptest.OnHub(hub, protocol.ConnOptions{Owner: owner})
		t.Cleanup(func() { _ = c.Close(testwait.Hang) })
		if _, err := c.Init(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice, bob := connect("alice"), connect("bob")
	// A folder each: folders have owners.
	cwds := map[*acptest.Conn]string{alice: t.TempDir(), bob: t.TempDir()}
	open := func(c *acptest.Conn) acp.SessionId {
		res, err := c.NewSession(ctx, acp.NewSessionRequest{Cwd: cwds[c], McpServers: []acp.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		return res.SessionId
	}
	var naps [3]acp.SessionId
	for i := range naps {
		naps[i] = open(alice)
	}
	ping := open(bob)

	var mu sync.Mutex
	var order []string
	done := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	start := time.Now()
	asked := srv.Requests()
	for i, sid := range naps {
		wg.Go(func() {
			if res, err := alice.Ask(ctx, sid, "nap"); err != nil || res.StopReason != acp.StopReasonEndTurn {
				t.Errorf("nap %d: %v %v", i, res, err)
			}
			done("nap")
		})
		if i == 0 {
			waitFor(t, func() bool { return srv.Requests() > asked }) // the first nap holds the slot
		}
	}
	time.Sleep(100 * time.Millisecond) // the other naps queued
	var waited time.Duration
	wg.Go(func() {
		at := time.Now()
		if res, err := bob.Ask(ctx, ping, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
			t.Errorf("ping: %v %v", res, err)
		}
		waited = time.Since(at)
		done("ping")
	})
	wg.Wait()
	t.Logf("the other tenant's ping waited %v; all four turns took %v", waited.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	// The ping ends before a second nap can: each takes 0.7 s from its
	// grant, and the ping's slot comes right after the first.
	if i := slices.Index(order, "ping"); len(order) != 4 || i > 1 {
		t.Errorf("turns ended in the order %v: the ping should end before the second nap", order)
	}
}
