package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestClusterNodeCycles repeats what once in three runs made a few
// prompts fail with `unknown session` for sessions that exist (issue 28):
// one node of three, at a fixed address, is killed (kill -9), started
// again at the same address (a new member id there), then sent SIGTERM
// under load and started again, twice over. After each step every session,
// wherever it lives, answers a prompt.
func TestClusterNodeCycles(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	dir := t.TempDir()
	certs := tlsLines(clusterCerts(t))
	health, remote := freePorts(t, 3), freePorts(t, 3)
	extra := fmt.Sprintf("sessions:\n  enabled: true\nstore:\n  url: %q\nserve:\n  drainTimeout: 5s\n", pg.URL(t))
	start := func(i int) *node {
		var peers []string
		for j, p := range health {
			if j != i {
				peers = append(peers, fmt.Sprintf("%q", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))))
			}
		}
		cluster := fmt.Sprintf("cluster:\n  name: test\n  advertise: 127.0.0.1:%d\n  peers: [%s]\n  healthPort: %d\n  failureTimeout: %s\n  placement: spread\n%s",
			remote[i], strings.Join(peers, ", "), health[i], testFailureTimeout, certs)
		s := startServeModel(t, clusterBin, dir, fmt.Sprintf("node%d.yaml", i), scriptedModel, serveScript, cluster+extra, "MM_SERVE_TOKEN="+serveToken, "GORACE=exitcode=0")
		return &node{served: s, health: health[i]}
	}
	c := &testCluster{}
	for i := range 3 {
		c.nodes = append(c.nodes, start(i))
	}
	settled := func(what string, members int, among []*node) {
		t.Helper()
		waitUntil(t, what, func() bool {
			for _, nd := range among {
				if nd.readyz(t) != http.StatusOK || nd.members(t) != members {
					return false
				}
			}
			return true
		})
	}
	settled("three ready members", 3, c.nodes)
	ctx := testwait.Context(t)
	w := c.nodes[0].wire(t)
	project := c.nodes[0].project(t)
	var sids []acp.SessionId
	for range 24 {
		res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		sids = append(sids, res.SessionId)
	}
	failed := 0
	pingAll := func(step string) {
		t.Helper()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, sid := range sids {
			wg.Go(func() {
				if res, err := w.ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
					mu.Lock()
					failed++
					mu.Unlock()
					t.Errorf("%s: ping on %s: %v %v", step, sid, res, err)
				}
			})
		}
		wg.Wait()
	}
	pingAll("at start")
	for round := range 2 {
		if err := c.nodes[2].cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = c.nodes[2].waitExit(t, "kill -9")
		settled("two members after kill -9", 2, c.nodes[:2])
		pingAll(fmt.Sprintf("round %d, node 2 killed", round))
		c.nodes[2] = start(2)
		settled("three members after the restart", 3, c.nodes)
		pingAll(fmt.Sprintf("round %d, node 2 started again", round))
		var wg sync.WaitGroup
		wg.Go(func() { pingAll(fmt.Sprintf("round %d, during SIGTERM", round)) })
		if err := c.nodes[2].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := c.nodes[2].waitExit(t, "SIGTERM"); err != nil {
			t.Errorf("round %d: SIGTERM: %v", round, err)
		}
		wg.Wait()
		settled("two members after SIGTERM", 2, c.nodes[:2])
		pingAll(fmt.Sprintf("round %d, node 2 gone", round))
		c.nodes[2] = start(2)
		settled("three members again", 3, c.nodes)
		pingAll(fmt.Sprintf("round %d, node 2 back", round))
	}
	t.Logf("%d of the prompts failed", failed)
}
