package main

import (
	"testing"

	"strings"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
)

// TestClusterPlacesLocally: with cluster.placement local, the sessions a
// client opens (new and forked) live on the node it is connected to,
// whichever that is, and their turns are answered there; a client of
// another node that loads one of them reaches it where it lives, and its
// turns cross nodes. Under the default, spread, twelve sessions would all
// land on their client's node once in 4,096 runs.
func TestClusterPlacesLocally(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	c := &testCluster{nodes: startCluster(t, 2, "  placement: local\nsessions:\n  enabled: true\n")}
	ctx := testwait.Context(t)
	project := c.nodes[0].project(t)
	clients := []*wireClient{c.nodes[0].wire(t), c.nodes[1].wire(t)}
	placed := func(i int, sid acp.SessionId, what string) {
		t.Helper()
		var at int
		waitUntil(t, "the session's node logging it", func() bool { at = c.hosts(sid); return at >= 0 })
		if at != i {
			t.Errorf("%s %s of node %d's client lives on node %d", what, sid, i, at)
		}
	}
	mine := map[int][]acp.SessionId{}
	for i, w := range clients {
		for range 6 {
			res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
			if err != nil {
				t.Fatal(err)
			}
			placed(i, res.SessionId, "session")
			mine[i] = append(mine[i], res.SessionId)
		}
		for _, sid := range mine[i] {
			if res, err := w.ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
				t.Errorf("ping on %s through node %d: %v %v", sid, i, res, err)
			}
		}
		fork, err := w.UnstableForkSession(ctx, acp.UnstableForkSessionRequest{SessionId: mine[i][0], Cwd: project})
		if err != nil {
			t.Fatalf("fork through node %d: %v", i, err)
		}
		placed(i, fork.SessionId, "the fork")
	}
	if t.Failed() {
		return
	}

	// Node 1's client loads a session node 0's client opened: it stays on
	// node 0, and its turns go there and back.
	sid := mine[0][1]
	if _, err := clients[1].LoadSession(ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: project, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("load of node 0's session through node 1: %v", err)
	}
	if res, err := clients[1].ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("ping on node 0's session through node 1: %v %v", res, err)
	}
	// Each node holds its own client's six sessions and fork, and no
	// more: the load made no second copy on node 1. (hosts finds the
	// first log of a session, node 0's, whatever came after it.)
	for i, nd := range c.nodes {
		if m, want := nd.metricsOf(t), "mm_cluster_grains{kind=\"session\"} 7\n"; !strings.Contains(m, want) {
			t.Errorf("node %d's /metrics lacks %q after the load:\n%s", i, want, m)
		}
	}
	if text := acptest.Text(clients[1].rec.Updates(sid)); !strings.Contains(text, "pong") {
		t.Errorf("node 1's client saw %q of the session", text)
	}
}
