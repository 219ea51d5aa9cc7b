package stress

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/grains"
	"github.com/mm-agent/mm/internal/testwait"
)

// TestClusterRun: a run against three `mm serve` it starts as one
// cluster (-nodes 3) passes every check, its connections reach every
// node, and its sessions live on more than one node; with -placement
// local, and with mm's default (balanced) for so few sessions, each node
// holds the sessions of its own connection.
func TestClusterRun(t *testing.T) {
	testwait.Short(t, "a run against a cluster of three mm serve")
	for _, placement := range []string{"spread", "local", ""} {
		t.Run(cmp.Or(placement, "balanced"), func(t *testing.T) {
			c := Defaults()
			c.Sessions, c.Turns, c.Concurrency = 30, 4, 8
			c.Serve, c.Nodes, c.Conns, c.Placement = binary(t, "mm"), 3, 1, placement
			r, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			r.Human(testWriter{t})
			if !r.OK() || r.Turns != 30*4 || r.Connections != 3 {
				t.Fatal("run not OK, or not one connection per node")
			}
			if !strings.Contains(r.Mode, "3 mm serve nodes") || !strings.Contains(r.Memory, "sum of the 3 nodes") ||
				!strings.Contains(r.Mode, "placement "+cmp.Or(placement, "mm's default")+")") {
				t.Errorf("mode %q, memory %q", r.Mode, r.Memory)
			}
			hosting, sum := 0, 0
			for _, n := range r.Grains {
				if n > 0 {
					hosting++
					sum += n
				}
			}
			if len(r.Grains) != 3 || hosting < 2 || sum != 30 {
				t.Errorf("session grains per node %v: want 30 over more than one node", r.Grains)
			}
			if placement != "spread" && !slices.Equal(r.Grains, []int{10, 10, 10}) {
				t.Errorf("session grains per node %v: want each node's connection's 10", r.Grains)
			}
		})
	}
}

// TestClusterKillNode: -kill-node kills the last node of the run's
// cluster in the middle of its turns (each streams 40 words at 200 a
// second, 0.2 s): every prompt is answered or fails with the node, none
// is lost or answered twice, the checks hold for every answered turn, and
// every session whose turn failed goes on on a live node.
func TestClusterKillNode(t *testing.T) {
	testwait.Short(t, "a node of three killed during a run")
	c := Defaults()
	c.Sessions, c.Turns, c.Concurrency = 30, 6, 16
	c.Serve, c.Nodes, c.Conns, c.Persist = binary(t, "mm"), 3, 2, true
	c.TokensPerS, c.Words, c.KillNode = 200, 40, 400*time.Millisecond
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	r.Human(testWriter{t})
	k := r.Kill
	if k == nil || k.After == 0 || k.Node != 2 {
		t.Fatalf("the node was not killed: %+v", k)
	}
	if !r.OK() || k.Lost != 0 || r.ExtraAnswers != 0 {
		t.Fatal("run not OK")
	}
	// Every prompt is counted once; a session whose last turn failed runs
	// one more, which is not among the turns.
	if n := k.Answered + k.Failed + k.Lost; n < r.Turns || n > r.Turns+k.Failed {
		t.Errorf("%d prompts counted for %d turns: %+v", n, r.Turns, k)
	}
	if k.Failed == 0 {
		t.Log("no turn ran on the killed node when it died")
	} else if k.Resumed != k.Failed || k.FirstFailure <= 0 || k.Reactivation <= 0 {
		t.Errorf("failed turns: %+v", k)
	}
	if r.Connections != 2 {
		t.Errorf("%d connections: the killed node must take none", r.Connections)
	}
}

// TestClusterKillNodeOnLastTurn: with one turn per session, the kill
// lands on each session's last turn: a session whose turn failed runs one
// more (a ping, not among the turns), which must be answered on a live
// node. The turns stream for 5 s and the kill comes 1 s in: their prompts,
// all sent at once, have a second to reach their nodes however slow the
// machine, and still stream when it dies.
func TestClusterKillNodeOnLastTurn(t *testing.T) {
	testwait.Short(t, "a node of three killed on the sessions' last turn")
	c := Defaults()
	c.Sessions, c.Turns, c.Concurrency = 30, 1, 64
	c.Serve, c.Nodes, c.Conns, c.Persist = binary(t, "mm"), 3, 2, true
	c.TokensPerS, c.Words, c.KillNode = 200, 1000, time.Second
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	r.Human(testWriter{t})
	k := r.Kill
	if k == nil || !r.OK() || k.Lost != 0 || r.ExtraAnswers != 0 {
		t.Fatalf("run not OK: %+v", k)
	}
	if k.Failed == 0 {
		t.Fatal("no turn ran on the killed node when it died (30 turns of 5 s, all at once, the kill at 1 s)")
	}
	if k.Resumed != k.Failed || k.Answered+k.Failed != int64(r.Turns)+k.Failed {
		t.Errorf("%d turns; answered %d, failed %d, resumed %d: each failed session's extra turn must be answered", r.Turns, k.Answered, k.Failed, k.Resumed)
	}
}

// TestClusterByURLs: -url takes the nodes of a cluster started apart, the
// connections round-robin over them.
func TestClusterByURLs(t *testing.T) {
	testwait.Short(t, "a run against two mm serve started apart")
	dir := t.TempDir()
	c := Defaults()
	c.Sessions, c.Turns, c.Concurrency = 10, 2, 4
	c.Serve, c.Nodes = binary(t, "mm"), 2
	const token = "cluster-by-urls-token-0123456789"
	procs, err := startServeProcs(context.Background(), &c, dir, "", token)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{token: token, http: &http.Client{Transport: &http.Transport{}}}
	var urls []string
	for _, p := range procs {
		s.nodes = append(s.nodes, &node{proc: p, metrics: strings.Replace(strings.TrimSuffix(p.url, "/acp"), "ws", "http", 1) + "/metrics"})
		urls = append(urls, p.url)
	}
	defer func() {
		if err := s.stop(); err != nil {
			t.Error(err)
		}
	}()
	if err := s.waitCluster(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	c.Serve, c.Nodes = "", 1
	c.URL, c.Token, c.Dir, c.Conns = strings.Join(urls, ","), token, dir, 2
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Turns != 10*2 || r.Connections != 2 || !strings.Contains(r.Mode, "2 mm serve nodes at ") {
		r.Human(testWriter{t})
		t.Fatal("run not OK")
	}
}

// TestNodeLostError: the harness knows mm's node-lost error and the
// edge's other cluster failures, and nothing else, as a turn failed with
// its node.
func TestNodeLostError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&rpcError{Code: -32603, Message: grains.NodeLost}, true},
		{&rpcError{Code: -32603, Message: "cluster: the node of session s1 could not be reached: timeout"}, true},
		{&rpcError{Code: -32603, Message: "scripted failure"}, false},
		{errors.New(grains.NodeLost), false}, // not an answer: the connection's own
		{context.DeadlineExceeded, false},
	} {
		if got := failedWithNode(tc.err); got != tc.want {
			t.Errorf("%v: %t, want %t", tc.err, got, tc.want)
		}
	}
}

// TestExtraAnswers: a second answer to a request, or one to a request
// never sent, is counted; a late answer to one given up on is not.
func TestExtraAnswers(t *testing.T) {
	pr, pw := io.Pipe()
	sent := make(chan []byte, 4)
	c := newRPC(lines(writerFunc(func(p []byte) (int, error) { sent <- append([]byte(nil), p...); return len(p), nil }), pr), nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.call(ctx, "a", json.RawMessage(`{}`), ""); done <- err }() // id 1, answered twice
	<-sent
	go func() {
		_, _ = io.WriteString(pw, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := c.extraAnswers(); n != 0 {
		t.Errorf("%d extra answers after the first, want 0", n)
	}
	go func() { _, err := c.call(ctx, "b", json.RawMessage(`{}`), ""); done <- err }() // id 2, given up on
	<-sent
	cancel()
	<-done
	_, _ = io.WriteString(pw, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n"+`{"jsonrpc":"2.0","id":2,"result":{}}`+"\n"+`{"jsonrpc":"2.0","id":9,"result":{}}`+"\n")
	pw.Close()
	<-c.done
	_ = c.close()
	if n := c.extraAnswers(); n != 2 {
		t.Errorf("%d extra answers, want 2 (id 1 again, id 9)", n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestClusterFlags: the cluster's flags are refused where they mean
// nothing.
func TestClusterFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"nodes without serve", func(c *Config) { c.Nodes = 3 }, "-nodes"},
		{"kill with one node", func(c *Config) { c.Serve, c.KillNode, c.Persist = "mm", time.Second, true }, "-nodes 2"},
		{"kill without persist", func(c *Config) { c.Serve, c.Nodes, c.KillNode = "mm", 3, time.Second }, "-persist"},
		{"short failure timeout", func(c *Config) { c.Serve, c.Nodes, c.FailureTimeout = "mm", 2, time.Millisecond }, "-failure-timeout"},
		{"a URL that is not ws", func(c *Config) { c.URL, c.Token = "ws://a/acp,http://b/acp", "x" }, "-url"},
		{"an unknown placement", func(c *Config) { c.Serve, c.Nodes, c.Placement = "mm", 3, "near" }, "-placement is balanced, local or spread"},
		{"placement without a cluster", func(c *Config) { c.Serve, c.Placement = "mm", "local" }, "-placement places"},
		{"kill with local placement", func(c *Config) {
			c.Serve, c.Nodes, c.KillNode, c.Persist, c.Placement = "mm", 3, time.Second, true, "local"
		}, "use spread"},
	} {
		c := Defaults()
		tc.set(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	c := Defaults()
	c.URL, c.Token = "ws://a/acp, wss://b/acp", "x"
	if err := c.validate(); err != nil {
		t.Errorf("two URLs: %v", err)
	}
}

// TestWaitClusterSaysWhy: a cluster that does not form within the bound
// fails the run with every node's state, and the end of the log of a node
// that exited (one the others counted out starts again): the first node's
// tail alone left the reader to guess.
func TestWaitClusterSaysWhy(t *testing.T) {
	defer func(d time.Duration) { joinTimeout = d }(joinTimeout)
	joinTimeout = 300 * time.Millisecond
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			fmt.Fprint(w, "# TYPE mm_cluster_members gauge\nmm_cluster_members 1\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1\n# TYPE go_goroutines gauge\ngo_goroutines 1\n")
		}
	}))
	defer up.Close()
	gone := &serveProc{tail: &tail{}, exited: make(chan error, 1)}
	_, _ = gone.tail.Write([]byte("cluster: the member x counted this node out\n"))
	gone.exited <- errors.New("exit status 1")
	s := &server{http: up.Client(), nodes: []*node{
		{metrics: up.URL + "/metrics", proc: &serveProc{tail: &tail{}, exited: make(chan error, 1)}},
		{metrics: "http://127.0.0.1:1/metrics", proc: gone},
	}}
	err := s.waitCluster(context.Background(), 2)
	if err == nil {
		t.Fatal("a cluster of one live node of two formed")
	}
	for _, want := range []string{"node 0 of 2 not ready with 2 members", "(ready true, members 1)", "node 1: ready false, members -1, exited (exit status 1)", "counted this node out"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
}
