package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"golang.org/x/sys/unix"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/cmd/internal/cli"
	"github.com/mm-agent/mm/internal/testwait"
)

// netnsEnv, set to 1, makes the partition tests fail where they cannot
// make network namespaces (not root, no ip or nft) instead of skipping:
// .ci/run sets it after installing nftables.
const netnsEnv = "MM_REQUIRE_NETNS"

// netns is a network namespace of the test's, removed at its end: its
// name for ip, and a descriptor of it held from its making, which the
// test's own sockets join (do): a descriptor stays the namespace's
// whatever becomes of the mount of /run/netns/NAME (a full run once saw it
// go mid-test, and every dial into the namespace failed with "invalid
// argument" from then on).
type netns struct {
	name string
	fd   int
}

// needNetns skips (or fails, with MM_REQUIRE_NETNS=1) a test that needs
// network namespaces and nft where this process cannot make them.
func needNetns(t *testing.T) {
	t.Helper()
	why := ""
	switch {
	case runtime.GOOS != "linux":
		why = "network namespaces are Linux's"
	case os.Geteuid() != 0:
		why = "making network namespaces needs root"
	default:
		for _, tool := range []string{"ip", "nft"} {
			if _, err := exec.LookPath(tool); err != nil {
				why = tool + " is not installed (Debian: iproute2, nftables)"
			}
		}
	}
	if why == "" {
		return
	}
	if os.Getenv(netnsEnv) == "1" {
		t.Fatalf("%s, and %s=1", why, netnsEnv)
	}
	t.Skip(why)
}

// run runs a command and fails the test if it fails.
func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newNetns(t *testing.T, name string) *netns {
	t.Helper()
	_ = exec.Command("ip", "netns", "del", name).Run() // a run killed before its cleanup
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	n := &netns{name: name, fd: fd}
	n.ip(t, "link", "set", "lo", "up")
	return n
}

// ip runs `ip ARGS` in the namespace.
func (n *netns) ip(t *testing.T, args ...string) {
	t.Helper()
	run(t, append([]string{"ip", "-n", n.name}, args...)...)
}

// nft runs an nft script in the namespace.
func (n *netns) nft(t *testing.T, script string) {
	t.Helper()
	// Through its descriptor, as do: nsenter joins the namespace the
	// descriptor (its fd 3) is.
	dup, err := unix.Dup(n.fd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), n.name) // a copy: an os.File closes its descriptor
	defer f.Close()
	cmd := exec.Command("nsenter", "--net=/proc/self/fd/3", "nft", "-f", "-")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v\n%s\n%s", n.name, err, out, script)
	}
}

// exec is the prefix that runs a command in the namespace.
func (n *netns) exec() []string { return []string{"ip", "netns", "exec", n.name} }

// do runs f on a thread of its own that entered the namespace: the
// sockets f opens are the namespace's. The thread is never given back to
// the Go scheduler: it ends with its goroutine.
func (n *netns) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
		if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
			// Its path, then: whichever of the two went, the other
			// may still be the namespace.
			fd, oerr := unix.Open("/run/netns/"+n.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if oerr == nil {
				defer unix.Close(fd)
				err = unix.Setns(fd, unix.CLONE_NEWNET)
			}
			if err != nil {
				errc <- fmt.Errorf("setns %s: %w", n.name, err)
				return
			}
		}
		errc <- f()
	}()
	return <-errc
}

// listen listens on addr in the namespace.
func (n *netns) listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := n.do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, n.name, err)
	}
	return ln
}

// dial connects to addr in the namespace.
func (n *netns) dial(addr string) (net.Conn, error) {
	var c net.Conn
	err := n.do(func() (err error) { c, err = net.Dial("tcp", addr); return err })
	return c, err
}

// forward accepts on ln until the test ends and joins each connection to
// one dial makes.
func forward(t *testing.T, ln net.Listener, dial func() (net.Conn, error)) {
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				up, err := dial()
				for try := 1; err != nil && try < 3; try++ {
					// Said, so that a failure of the test's own
					// plumbing has its reason in the log; tried
					// again: a dial into a namespace failed once in
					// a full run ("invalid argument"), never alone.
					t.Logf("forwarder: %v; trying again", err)
					time.Sleep(100 * time.Millisecond)
					up, err = dial()
				}
				if err != nil {
					t.Logf("forwarder: %v", err)
					c.Close()
					return
				}
				mu.Lock()
				conns[c], conns[up] = true, true
				mu.Unlock()
				done := make(chan struct{}, 2)
				pipe := func(dst, src net.Conn) {
					_, _ = io.Copy(dst, src)
					dst.Close()
					src.Close()
					done <- struct{}{}
				}
				go pipe(up, c)
				go pipe(c, up)
				<-done
				<-done
				mu.Lock()
				delete(conns, c)
				delete(conns, up)
				mu.Unlock()
			})
		}
	})
}

var listeningRe = regexp.MustCompile(`(?m)^mm serve: listening on https?://(\S+)/acp$`)

// TestClusterPartition: three nodes, two in one network namespace and
// the third in another, joined by a veth pair, sessions in Postgres. A
// session lives on the majority's side. nft in the third node's namespace
// drops every packet between the sides, silently: the majority counts the
// third out and the third counts them out, each a cluster of its own, all
// still reaching Postgres. A client of the third node loads the session
// and runs a turn there; the majority's copy, now older than the store,
// reads it again before its next turn, which has the third node's turn
// (a load through the majority replays all three). The partition heals:
// the third node finds it was counted out for good, says so, drains and
// starts again (the same process, exec), and the cluster has three
// members again, every node ready; its clients go on through it.
func TestClusterPartition(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	needNetns(t)
	tag := fmt.Sprintf("mmp%d", os.Getpid()%100000)
	a, b := newNetns(t, tag+"a"), newNetns(t, tag+"b")
	run(t, "ip", "link", "add", tag+"x", "netns", a.name, "type", "veth", "peer", "name", tag+"y", "netns", b.name)
	a.ip(t, "addr", "add", "10.77.0.1/24", "dev", tag+"x")
	a.ip(t, "link", "set", tag+"x", "up")
	b.ip(t, "addr", "add", "10.77.0.2/24", "dev", tag+"y")
	b.ip(t, "link", "set", tag+"y", "up")

	// Postgres, on this machine, is reached in each namespace through a
	// forwarder of the test's on 127.0.0.1:15432 there.
	u, err := neturl.Parse(pg.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	pgAddr := u.Host
	u.Host = "127.0.0.1:15432"
	for _, ns := range []*netns{a, b} {
		forward(t, ns.listen(t, u.Host), func() (net.Conn, error) { return net.Dial("tcp", pgAddr) })
	}

	tls := clusterTLS(t)
	dir := t.TempDir()
	type place struct {
		ns   *netns
		host string
		hp   int
	}
	places := []place{{a, "10.77.0.1", 7101}, {a, "10.77.0.1", 7102}, {b, "10.77.0.2", 7103}}
	nodes := make([]*node, len(places))
	for i, p := range places {
		var peers []string
		for j, q := range places {
			if j != i {
				peers = append(peers, fmt.Sprintf("%q", fmt.Sprintf("%s:%d", q.host, q.hp)))
			}
		}
		cluster := fmt.Sprintf("cluster:\n  name: test\n  advertise: %s:0\n  peers: [%s]\n  healthPort: %d\n  failureTimeout: %s\n  placement: spread\n%s",
			p.host, strings.Join(peers, ", "), p.hp, testFailureTimeout, tls)
		extra := cluster + fmt.Sprintf("sessions:\n  enabled: true\nstore:\n  url: %q\nserve:\n  drainTimeout: 2s\n", u.String())
		s := startServeIn(t, p.ns.exec(), clusterBin, dir, fmt.Sprintf("node%d.yaml", i), scriptedModel, serveScript, extra,
			"MM_SERVE_TOKEN="+serveToken, "GORACE=exitcode=0")
		// The test reaches the node, in its namespace, through a
		// forwarder here, to wherever it said last that it listens.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ns := p.ns
		forward(t, ln, func() (net.Conn, error) {
			m := listeningRe.FindAllStringSubmatch(s.stderr.String(), -1)
			return ns.dial(m[len(m)-1][1])
		})
		s.url = "http://" + ln.Addr().String() + "/acp"
		s.ws = "ws://" + ln.Addr().String() + "/acp"
		nodes[i] = &node{served: s, health: p.hp}
	}
	everyone := func(members int) func() bool {
		return func() bool {
			for _, nd := range nodes {
				if nd.readyz(t) != http.StatusOK || nd.members(t) != members {
					return false
				}
			}
			return true
		}
	}
	waitUntil(t, "three ready members", everyone(3))

	c := &testCluster{nodes: nodes}
	ctx := testwait.Context(t)
	w := nodes[0].wire(t)
	project := nodes[0].project(t)
	sid := c.sessionOn(t, ctx, w, project, "the majority's side", func(n int) bool { return n != 2 })
	if r, err := w.ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping: %v %v", r, err)
	}

	b.nft(t, "table inet partition {\n chain in { type filter hook input priority 0; ip saddr 10.77.0.1 drop; }\n chain out { type filter hook output priority 0; ip daddr 10.77.0.1 drop; }\n}\n")
	waitUntil(t, "the sides counting each other out", func() bool {
		return nodes[0].members(t) == 2 && nodes[1].members(t) == 2 && nodes[2].members(t) == 1
	})
	x := nodes[2].wire(t)
	if _, err := x.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: project, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("load on the cut-off node: %v", err)
	}
	if r, err := x.ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping on the cut-off node: %v %v", r, err)
	}
	if r, err := w.ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping on the majority after the cut-off node's turn: %v %v", r, err)
	}
	replayed := func(through *node) string {
		t.Helper()
		l := through.wire(t)
		if _, err := l.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: project, McpServers: []acp.McpServer{}}); err != nil {
			t.Fatalf("load: %v", err)
		}
		return acptest.Text(l.rec.Updates(sid))
	}
	if got := strings.Count(replayed(nodes[1]), "pong"); got != 3 {
		t.Errorf("a load through the majority replays %d turns, want 3: the store's, the cut-off node's turn included", got)
	}

	b.nft(t, "delete table inet partition\n")
	waitUntil(t, "the cut-off node saying it was counted out", func() bool {
		return strings.Contains(nodes[2].stderr.String(), "counted this node out") &&
			strings.Contains(nodes[2].stderr.String(), "serve: stopped; starting again to rejoin the cluster")
	})
	waitUntil(t, "three ready members again", everyone(3))
	// Started again in place (exec, the same pid), the node keeps its
	// name, mm-node's (mm handed off to it): exec'ing /proc/self/exe
	// named it "exe".
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", nodes[2].cmd.Process.Pid)); err != nil || strings.TrimSpace(string(comm)) != cli.NodeBinary {
		t.Errorf("the node started again is named %q (%v), want %s", comm, err, cli.NodeBinary)
	}
	x2 := nodes[2].wire(t)
	if _, err := x2.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: project, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("load through the node that rejoined: %v", err)
	}
	if r, err := x2.ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping through the node that rejoined: %v %v", r, err)
	}
	if got := strings.Count(replayed(nodes[0]), "pong"); got != 4 {
		t.Errorf("a load after the rejoin replays %d turns, want 4", got)
	}
}
