package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
)

// TestClusterPlacesLocally: with cluster.placement local, the sessions a
// client opens (new and forked) live on the node it is connected to,
// whichever that is, and their turns are answered there; a client of
// another node that loads one of them reaches it where it lives, and its
// turns cross nodes. Under spread, twelve sessions would all
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

// TestClusterBalances: under cluster.placement balanced, the default, the
// sessions a client opens live on its node while that node holds no more
// than its share of the cluster's sessions and a margin (eight, for so
// few): node 0's first 17 stay there, whatever the gossip has said yet of
// node 1. Past them, once node 0 has node 1's count from the gossip, node
// 0 says so, and what its client opens is spread, and some of it lands on
// node 1; node 1's client, whose node holds fewer, keeps its own; node 0's
// /metrics counts both. Under spread, 17
// sessions would all stay on node 0 once in 131,072 runs; under local,
// none would ever land on node 1.
func TestClusterBalances(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	c := &testCluster{nodes: startCluster(t, 2, "  placement: balanced\n")}
	ctx := testwait.Context(t)
	project := c.nodes[0].project(t)
	w0, w1 := c.nodes[0].wire(t), c.nodes[1].wire(t)
	for i := range 17 {
		if sid, at := c.open(t, ctx, w0, project); at != 0 {
			t.Fatalf("session %d (%s) of node 0's client, which held %d, lives on node %d", i+1, sid, i, at)
		}
	}
	// An 18th puts node 0 past its share; once the gossip has brought
	// node 1's count, node 0 says it spreads, and what its client opens
	// then lands on node 1 one time in two.
	c.open(t, ctx, w0, project)
	waitUntil(t, "node 0 saying it spreads", func() bool {
		return strings.Contains(c.nodes[0].stderr.String(), "more than its share (the 2 member(s) hold")
	})
	spread := false
	for range 30 {
		if _, at := c.open(t, ctx, w0, project); at == 1 {
			spread = true
			break
		}
	}
	if !spread {
		t.Fatal("none of 30 sessions node 0's client opened past its share landed on node 1")
	}
	m := c.nodes[0].metricsOf(t)
	here := 0
	if got := regexp.MustCompile(`mm_cluster_sessions_placed_total\{where="here"\} (\d+)\n`).FindStringSubmatch(m); got != nil {
		here, _ = strconv.Atoi(got[1])
	}
	if here < 17 {
		t.Errorf("node 0's /metrics does not count the 17 sessions or more it kept:\n%s", m)
	}
	if !regexp.MustCompile(`mm_cluster_sessions_placed_total\{where="any"\} [1-9]`).MatchString(m) {
		t.Errorf("node 0's /metrics counts no session it spread:\n%s", m)
	}
	for i := range 3 {
		if sid, at := c.open(t, ctx, w1, project); at != 1 {
			t.Errorf("session %d (%s) of node 1's client lives on node %d", i+1, sid, at)
		}
	}
	if res, err := w1.ask(ctx, c.sessionOn(t, ctx, w1, project, "node 1", func(at int) bool { return at == 1 }), "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("ping through node 1: %v %v", res, err)
	}
}
