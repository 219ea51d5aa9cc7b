package main

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/grains/grainstest"
	"github.com/mm-agent/mm/internal/clustertls"
	"github.com/mm-agent/mm/internal/testwait"
)

// clusterTLS makes a set of cluster certificates in a folder of the test's
// and returns the config lines that give them to a node (they continue
// the cluster: block startCluster writes).
func clusterTLS(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cluster")
	if err := clustertls.Generate(dir, time.Hour); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("  tls:\n    cert: %q\n    key: %q\n    ca: %q\n",
		filepath.Join(dir, clustertls.CertFile), filepath.Join(dir, clustertls.KeyFile), filepath.Join(dir, clustertls.CAFile))
}

// attack is what an outsider did through a cluster's port in issue 28: ask
// a node for a fresh session's grain, make the session as a client of the
// node's (any owner, any folder), and run bash in it. It returns what came
// back, or the first error.
func attack(t *testing.T, o *grainstest.Outsider, node, cwd string) (string, error) {
	t.Helper()
	sid := fmt.Sprintf("20261203-000000-%08x", time.Now().UnixNano()&0xffffffff)
	grain, err := o.Activate(node, sid, 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("activation: %w", err)
	}
	if err := o.Call(grain, 1, "mallory", acp.AgentMethodSessionNew, "1", sid, func(c *grainspb.Call) {
		c.Params = &grainspb.Call_Open{Open: &grainspb.Open{Cwd: cwd, McpServers: []byte("[]")}}
	}, 5*time.Second); err != nil {
		return "", fmt.Errorf("session/new: %w", err)
	}
	if err := o.Call(grain, 2, "mallory", acp.AgentMethodSessionPrompt, "2", sid, func(c *grainspb.Call) {
		c.Params = &grainspb.Call_Prompt{Prompt: &grainspb.Prompt{Blocks: []*grainspb.Content{{Block: &grainspb.Content_Text{Text: &grainspb.Text{Text: "bash"}}}}}}
	}, 5*time.Second); err != nil {
		return "", fmt.Errorf("session/prompt: %w", err)
	}
	var text string
	waitUntil(t, "the outsider's prompt answered", func() bool {
		var ids []string
		text, ids = o.Written()
		return len(ids) == 2
	})
	return text, nil
}

// TestClusterOutsider: a program that reaches a node's cluster port, with
// no token and no certificate of the cluster's CA, ran bash through it and
// read the answer (issue 28). On loopback without cluster.tls it still can
// — that is what the test peer does, and why anything but loopback needs
// cluster.tls — and with cluster.tls it is refused before any message is
// read, also when it takes a stopped member's address and answers that
// member's health endpoint: it never becomes a member, and no session is
// placed on it.
func TestClusterOutsider(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	t.Run("loopback without tls", func(t *testing.T) {
		nodes := startCluster(t, 2, "")
		o, err := grainstest.NewOutsider("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		text, err := attack(t, o, nodes[0].address(t), nodes[0].project(t))
		if err != nil || !strings.Contains(text, "ran-in-bash") {
			t.Fatalf("the test peer did not get in where nothing stops it (%v): %q", err, text)
		}
	})
	t.Run("tls", func(t *testing.T) {
		nodes := startCluster(t, 2, clusterTLS(t))
		o, err := grainstest.NewOutsider("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		for i, nd := range nodes {
			if _, err := attack(t, o, nd.address(t), nd.project(t)); err == nil {
				t.Errorf("node %d took the outsider's calls", i)
			}
			if strings.Contains(nd.stderr.String(), "mallory") || strings.Contains(nd.stderr.String(), "created in") {
				t.Errorf("node %d made a session for the outsider:\n%s", i, nd.stderr.String())
			}
		}
		if text, ids := o.Written(); text != "" || len(ids) > 0 {
			t.Errorf("the outsider read %q, answers %v", text, ids)
		}
		// The members still serve their clients.
		w := nodes[0].wire(t)
		ctx := testwait.Context(t)
		res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: nodes[0].project(t), McpServers: []acp.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := w.ask(ctx, res.SessionId, "bash"); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("a client's turn on a cluster with tls: %v %v", r, err)
		}
	})
	t.Run("tls, a stolen member's address", func(t *testing.T) {
		certs := clusterTLS(t)
		nodes := startCluster(t, 2, certs)
		c := &testCluster{nodes: nodes}
		stolen := nodes[1].address(t)
		_ = nodes[1].cmd.Process.Signal(syscall.SIGKILL)
		waitUntil(t, "node 0 counting node 1 out", func() bool { return nodes[0].members(t) == 1 })
		// The outsider takes node 1's remote address and its health port,
		// and answers node 0's polls as a member, over HTTPS with a
		// certificate of its own CA.
		o, err := grainstest.NewOutsider(stolen)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		dir := filepath.Join(t.TempDir(), "stranger")
		if err := clustertls.Generate(dir, time.Hour); err != nil {
			t.Fatal(err)
		}
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, clustertls.CertFile), filepath.Join(dir, clustertls.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		stop, err := o.ServeHealth(fmt.Sprintf("127.0.0.1:%d", nodes[1].health), "test", &cert)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		// Node 0 polls its peers four times in the failure timeout: after
		// two timeouts, a stranger it took would be listed.
		time.Sleep(2 * testFailureTimeout)
		if n := nodes[0].members(t); n != 1 {
			t.Fatalf("node 0 counts %d members with the outsider at node 1's address", n)
		}
		w := nodes[0].wire(t)
		ctx := testwait.Context(t)
		for range 6 {
			res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: nodes[0].project(t), McpServers: []acp.McpServer{}})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := w.ask(ctx, res.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
				t.Fatalf("a turn: %v %v", r, err)
			}
			if h := c.hosts(res.SessionId); h != 0 {
				t.Errorf("session %s is on node %d", res.SessionId, h)
			}
		}
		if text, ids := o.Written(); text != "" || len(ids) > 0 {
			t.Errorf("the outsider read %q, answers %v", text, ids)
		}
	})
}
