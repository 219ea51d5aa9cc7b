package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/clustertls"
	"github.com/mm-agent/mm/grains/grainstest"
	"github.com/mm-agent/mm/internal/testwait"
)

// clusterTLS makes a set of cluster certificates in a folder of the test's
// and returns the config lines that give them to a node (they continue
// the cluster: block startCluster writes).
func clusterTLS(t *testing.T) string {
	t.Helper()
	return tlsLines(clusterCerts(t))
}

// clusterCerts makes a set of cluster certificates (`mm cluster-certs`) in
// a folder of the test's, and returns the folder.
func clusterCerts(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cluster")
	if err := clustertls.Generate(dir, time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tlsLines are the config lines that give a node the certificates in dir
// (they continue the cluster: block startCluster writes).
func tlsLines(dir string) string {
	return fmt.Sprintf("  tls:\n    cert: %q\n    key: %q\n    ca: %q\n",
		filepath.Join(dir, clustertls.CertFile), filepath.Join(dir, clustertls.KeyFile), filepath.Join(dir, clustertls.CAFile))
}

// outsider runs the test peer of grains/grainstest as a process of its
// own (this test binary, as grainstest.Main), in mode with env, and
// returns it started.
func outsider(t *testing.T, mode string, env ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// Its protoactor races with itself: not this test's business.
	cmd.Env = append(os.Environ(), append([]string{grainstest.Env + "=" + mode, "GORACE=exitcode=0"}, env...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, in, bufio.NewReader(out)
}

// result reads the outsider's last line: what it got.
func result(t *testing.T, r *bufio.Reader) grainstest.Result {
	t.Helper()
	var res grainstest.Result
	if err := json.NewDecoder(r).Decode(&res); err != nil {
		t.Fatalf("the outsider's result: %v", err)
	}
	return res
}

// attack runs the outsider's attack on the node at address, in cwd.
func attack(t *testing.T, address, cwd string) grainstest.Result {
	t.Helper()
	_, _, out := outsider(t, "attack", "OUTSIDER_NODE="+address, "OUTSIDER_CWD="+cwd)
	return result(t, out)
}

// TestClusterOutsider: a program that reaches a node's cluster port, with
// no token and no certificate of the cluster's CA, ran bash through it and
// read the answer (issue 28). A cluster has cluster.tls (a node without
// it does not start: TestClusterRefusesToStart), and the program is
// refused before any message is read, also when it takes a stopped
// member's address and answers that member's health endpoint: it never
// becomes a member, and no session is placed on it.
func TestClusterOutsider(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	t.Run("tls", func(t *testing.T) {
		nodes := startCluster(t, 2, "")
		for i, nd := range nodes {
			r := attack(t, nd.address(t), nd.project(t))
			if r.Err == "" || r.Text != "" || len(r.Answered) > 0 {
				t.Errorf("node %d took the outsider's calls: %+v", i, r)
			}
			if strings.Contains(nd.stderr.String(), "mallory") || strings.Contains(nd.stderr.String(), "created in") {
				t.Errorf("node %d made a session for the outsider:\n%s", i, nd.stderr.String())
			}
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
		nodes := startCluster(t, 2, "")
		c := &testCluster{nodes: nodes}
		stolen := nodes[1].address(t)
		_ = nodes[1].cmd.Process.Signal(syscall.SIGKILL)
		waitUntil(t, "node 0 counting node 1 out", func() bool { return nodes[0].members(t) == 1 })
		// The outsider takes node 1's remote address and its health port,
		// and answers node 0's polls as a member, over HTTPS with a
		// certificate of its own CA.
		dir := filepath.Join(t.TempDir(), "stranger")
		if err := clustertls.Generate(dir, time.Hour); err != nil {
			t.Fatal(err)
		}
		_, in, out := outsider(t, "steal", "OUTSIDER_LISTEN="+stolen, fmt.Sprintf("OUTSIDER_HEALTH=127.0.0.1:%d", nodes[1].health),
			"OUTSIDER_CERT="+filepath.Join(dir, clustertls.CertFile), "OUTSIDER_KEY="+filepath.Join(dir, clustertls.KeyFile))
		if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("the outsider did not take node 1's address: %q %v", line, err)
		}
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
		in.Close()
		if r := result(t, out); r.Err != "" || r.Text != "" || len(r.Answered) > 0 {
			t.Errorf("the outsider: %+v", r)
		}
	})
}

// touchScript is serveScript and "touch", whose bash leaves a file in the
// session's folder: a sign that a turn ran there.
const touchScript = serveScript + `  - match: "^touch$"
    steps:
      - toolCalls: [{name: bash, args: {command: "touch touched-by-a-turn"}}]
      - {text: "touched"}
`

// TestClusterMemberIsNoOwner: a program that holds the cluster's
// certificate (a tenant's command that read node-key.pem) but no token
// speaks to a node as a member would: it asks for the session of a client
// of the cluster, naming that client's owner, and opens a session of its
// own as an owner no token has, then prompts it. The node refuses every
// call and says so in its log: no history is replayed to it, no session
// is made for it, and no command runs.
func TestClusterMemberIsNoOwner(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	nodes := startClusterScript(t, 2, scriptedModel, touchScript, "sessions:\n  enabled: true\n")
	certs := nodes[0].certs
	c := &testCluster{nodes: nodes}
	w := nodes[0].wire(t)
	ctx := testwait.Context(t)
	cwd := nodes[0].project(t)
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.ask(ctx, res.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the client's turn: %v %v", r, err)
	}
	h := c.hosts(res.SessionId)
	if h < 0 {
		t.Fatal("no node says it created the session")
	}
	_, _, out := outsider(t, "member", "OUTSIDER_NODE="+nodes[h].address(t), "OUTSIDER_TLS="+certs,
		"OUTSIDER_SESSION="+string(res.SessionId), "OUTSIDER_OWNER=default", "OUTSIDER_CWD="+cwd)
	r := result(t, out)
	t.Logf("the member without a token got: %s", r.Err)
	if r.Text != "" || len(r.Answered) > 0 || strings.Count(r.Err, "refused") < 3 {
		t.Errorf("node %d took the calls of a member without a token: %+v", h, r)
	}
	for _, item := range r.Items {
		if strings.Contains(item, `"text":"pong"`) || strings.Contains(item, `"text":"ping"`) {
			t.Errorf("the member was sent the client's history: %s", item)
		}
	}
	if _, err := os.Stat(filepath.Join(cwd, "touched-by-a-turn")); err == nil {
		t.Error("a turn of the member's session ran bash")
	}
	log := nodes[h].stderr.String()
	if strings.Contains(log, "mallory") && !strings.Contains(log, "refused") || strings.Count(log, " created") > 1 {
		t.Errorf("node %d made a session for the member:\n%s", h, log)
	}
	if !strings.Contains(log, "refused") {
		t.Errorf("node %d does not say it refused the member's calls:\n%s", h, log)
	}
	// The client's session is untouched: its next turn runs as before.
	if r, err := w.ask(ctx, res.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the client's turn after the member's calls: %v %v", r, err)
	}
}
