package main

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/clustertls"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
)

// TestClusterStream: a turn on a session of another node goes by the
// stream between the nodes (docs/cluster.md#the-stream), and the stream
// takes only the cluster's members, whose hostile frames close only their
// own connection. The attackers: a program with no certificate, one with
// a certificate of another CA, and one that holds the cluster's
// certificate (a tenant's command that read node-key.pem) and sends a
// frame too large, a frame of no known kind, and an Outs that does not
// decode; and one that opens connections and says nothing. Each is refused and logged, and the node's clients are served
// all along, by the stream; with cluster.streamPort -1, by the remote.
func TestClusterStream(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	t.Run("off", func(t *testing.T) {
		// cluster.streamPort -1: everything crosses through the remote,
		// the way a link takes when the stream cannot be dialed.
		nodes := startCluster(t, 2, "  streamPort: -1\n")
		c := &testCluster{nodes: nodes}
		ctx := testwait.Context(t)
		w := nodes[0].wire(t)
		sid := c.sessionOn(t, ctx, w, nodes[0].project(t), "node 1", func(at int) bool { return at == 1 })
		for range 3 {
			if r, err := w.ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
				t.Fatalf("a turn on node 1 through node 0 without the stream: %v %v", r, err)
			}
		}
		for i, nd := range nodes {
			if !strings.Contains(nd.stderr.String(), "stream at none") {
				t.Errorf("node %d has a stream with cluster.streamPort -1:\n%s", i, nd.stderr.String())
			}
			if n := metricValue(nd.metricsOf(t), "mm_cluster_stream_outs_total"); n != 0 {
				t.Errorf("node %d took %d messages from a stream it has not", i, n)
			}
		}
	})
	t.Run("hostname", func(t *testing.T) {
		// A node that advertises a name (advertise: ":4020", the pod's
		// hostname on Kubernetes) is a member at the address its remote
		// listens on, an IP: it names its stream there too, or no node
		// would dial it (Member.trustedStream).
		nodes := startCluster(t, 2, "  advertise: localhost:0\n")
		c := &testCluster{nodes: nodes}
		ctx := testwait.Context(t)
		w := nodes[0].wire(t)
		sid := c.sessionOn(t, ctx, w, nodes[0].project(t), "node 1", func(at int) bool { return at == 1 })
		for range 3 {
			if r, err := w.ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
				t.Fatalf("a turn on node 1 through node 0: %v %v", r, err)
			}
		}
		if n := metricValue(nodes[0].metricsOf(t), "mm_cluster_stream_outs_total"); n < 3 {
			t.Errorf("node 0 took %d Outs from its stream for 3 turns; it logged %s", n, streamAt(t, nodes[0]))
		}
	})
	nodes := startCluster(t, 2, "")
	c := &testCluster{nodes: nodes}
	ctx := testwait.Context(t)
	w := nodes[0].wire(t)
	sid := c.sessionOn(t, ctx, w, nodes[0].project(t), "node 1", func(at int) bool { return at == 1 })
	turn := func(what string) {
		t.Helper()
		if r, err := w.ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("a turn on node 1 through node 0, %s: %v %v", what, r, err)
		}
	}
	taken := func(i int) int { return metricValue(nodes[i].metricsOf(t), "mm_cluster_stream_outs_total") }
	for range 3 {
		turn("before the attacks")
	}
	// Each turn ends with a usage_update (typed across nodes: Out.usage),
	// whose figure is the session's history, which grows turn by turn.
	var used []int
	for _, u := range w.rec.Updates(sid) {
		if u.UsageUpdate != nil {
			used = append(used, u.UsageUpdate.Used)
		}
	}
	if len(used) < 3 || used[0] <= 0 || used[len(used)-1] <= used[0] {
		t.Errorf("the usage_updates of 3 turns on node 1, through node 0: %v", used)
	}
	// Node 0 took the session's output by its stream (its link on node 1
	// dialed it as it was made); node 1 takes the prompts sent straight
	// once node 0 has dialed it, which its first answer from there begins.
	if n := taken(0); n < 3 {
		t.Fatalf("the stream carried %d Outs to node 0 for 3 turns", n)
	}
	waitUntil(t, "node 1 taking a prompt by its stream", func() bool {
		turn("while node 0 dials node 1")
		return taken(1) >= 1
	})
	before := taken(0)

	at := streamAt(t, nodes[0])
	// No certificate, and another CA's: the handshake fails.
	stranger := filepath.Join(t.TempDir(), "stranger")
	if err := clustertls.Generate(stranger, time.Hour); err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string]string{"no certificate": "", "another CA's": stranger} {
		conn, err := streamDial(at, certs)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(testwait.Hang))
			// TLS 1.3: a refused client certificate shows at the first read.
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil {
			t.Errorf("the stream took a connection with %s", name)
		}
	}
	// Plain TCP, a frame's length and garbage: no TLS, nothing read.
	if conn, err := net.Dial("tcp", at); err == nil {
		_, _ = conn.Write([]byte{0, 0, 0, 9, 1, 0, 'x', 'x', 'x', 'x', 'x', 'x', 'x'})
		_ = conn.SetDeadline(time.Now().Add(testwait.Hang))
		_, _ = io.Copy(io.Discard, conn) // until the node closes it
		conn.Close()
	}
	// The cluster's certificate: each hostile frame closes its connection.
	frames := map[string][]byte{
		"a frame of 4294967295 bytes":  {0xff, 0xff, 0xff, 0xff},
		"a frame of kind 9":            frame(9, "x", []byte("hello")),
		"an Outs that does not decode": frame(1, "x", []byte{0xff, 0xff, 0xff}),
	}
	for why, f := range frames {
		conn, err := streamDial(at, nodes[0].certs)
		if err != nil {
			t.Fatalf("a member's certificate: %v", err)
		}
		_ = conn.SetDeadline(time.Now().Add(testwait.Hang))
		if _, err := conn.Write(f); err != nil {
			t.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, conn); err != nil || n != 0 {
			t.Errorf("%s: the node did not close the connection (%d bytes, %v)", why, n, err)
		}
		conn.Close()
		waitUntil(t, "node 0 logging "+why, func() bool { return strings.Contains(nodes[0].stderr.String(), "which sent "+why) })
	}
	waitUntil(t, "node 0 logging the refused handshakes", func() bool {
		return strings.Count(nodes[0].stderr.String(), "a connection to this node's stream from") >= 3
	})
	// Silent connections, as many as a node waits on the handshakes of
	// (grains.streamHandshakes): one more is closed by the bound, which
	// says so (a handshake's own deadline says another thing). Last:
	// their ends, refused handshakes all, spend what the node logs of
	// refusals this minute.
	var silent []net.Conn
	for range 64 {
		conn, err := net.Dial("tcp", at)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, conn)
	}
	if conn, err := net.Dial("tcp", at); err == nil {
		_ = conn.SetDeadline(time.Now().Add(testwait.Hang))
		_, err := io.Copy(io.Discard, conn) // until the node closes it
		conn.Close()
		t.Logf("the 65th silent connection: closed (%v)", err)
	}
	for _, conn := range silent {
		conn.Close()
	}
	waitUntil(t, "node 0 logging the connection over the bound", func() bool {
		return strings.Contains(nodes[0].stderr.String(), "have not ended their handshake")
	})

	for range 3 {
		turn("after the attacks")
	}
	if after := taken(0); after < before+3 {
		t.Errorf("node 0 took %d Outs from its stream after the attacks, %d before", after, before)
	}
}

// streamAt is where node nd's stream listens, as it logged.
func streamAt(t *testing.T, nd *node) string {
	t.Helper()
	m := regexp.MustCompile(`stream at (\S+)`).FindStringSubmatch(nd.stderr.String())
	if m == nil || m[1] == "none" {
		t.Fatalf("the node logged no stream:\n%s", nd.stderr.String())
	}
	return m[1]
}

// streamDial opens a TLS connection to a node's stream with the node
// certificate in certs ("" none), checking nothing of the node's.
func streamDial(at, certs string) (*tls.Conn, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true} //nolint:gosec // an attacker's
	if certs != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(certs, clustertls.CertFile), filepath.Join(certs, clustertls.KeyFile))
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: testwait.Hang}, Config: cfg}
	c, err := d.Dial("tcp", at)
	if err != nil {
		return nil, err
	}
	return c.(*tls.Conn), nil
}

// frame is one frame of the stream: its length, its kind, the id of
// whom it is for, and its body.
func frame(kind byte, id string, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(2+len(id)+len(body)))
	b = append(b, kind, byte(len(id)))
	b = append(b, id...)
	return append(b, body...)
}

// TestClusterStreamFromInside: a tenant's command, in its sandbox on a
// node (bubblewrap, then Landlock; the command as the sandbox's user, mm
// as whoever runs the tests, root in CI), reaches none of the cluster's
// ports on loopback — each node's stream, remote, health endpoint and
// ACP port — which the test itself reaches: the command's loopback is
// its session's own (docs/sandbox.md). A member's certificate would let
// it into the stream and the remote, and the sandbox hides the
// certificates (the walls tests); the ports are the way it would go first.
func TestClusterStreamFromInside(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	for _, with := range []string{"bubblewrap", "landlock"} {
		t.Run(with, func(t *testing.T) {
			switch with {
			case "bubblewrap":
				sandboxtest.Bubblewrap(t)
			case "landlock":
				if s := sandbox.LandlockOnly(); s.Kind() != sandbox.Landlock {
					t.Skip(s.Why())
				}
			}
			// The ports are known once the nodes listen: the command reads
			// them from its folder.
			script := serveScript + `  - match: "^probe$"
    steps:
      - toolCalls: [{name: bash, args: {command: "for p in $(cat ports); do (exec 3<>/dev/tcp/127.0.0.1/$p && echo REACHED-$p) 2>&1; done; echo PROBED"}}]
      - {text: "probe said: {{last_tool_output}}"}
`
			nodes := startClusterScript(t, 2, scriptedModel, script, fmt.Sprintf("sandbox:\n  with: %s\n  network: true\n", with))
			var ports []string
			for _, nd := range nodes {
				for _, at := range []string{streamAt(t, nd), nd.address(t), net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.health)), strings.TrimPrefix(strings.TrimSuffix(nd.url, "/acp"), "http://")} {
					c, err := net.Dial("tcp", at)
					if err != nil {
						t.Fatalf("the test does not reach %s itself: %v", at, err)
					}
					c.Close()
					_, port, _ := net.SplitHostPort(at)
					ports = append(ports, port)
				}
			}
			project := nodes[0].project(t)
			if err := os.WriteFile(filepath.Join(project, "ports"), []byte(strings.Join(ports, " ")), 0o644); err != nil {
				t.Fatal(err)
			}
			w := nodes[0].wire(t)
			ctx := testwait.Context(t)
			res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := w.ask(ctx, res.SessionId, "probe"); err != nil || r.StopReason != acp.StopReasonEndTurn {
				t.Fatalf("the probe's turn: %v %v", r, err)
			}
			text := acptest.Text(w.rec.Updates(res.SessionId))
			t.Logf("the tenant's command, with %s, on ports %v: %q", with, ports, text)
			if !strings.Contains(text, "PROBED") {
				t.Fatalf("the probe did not run to its end: %q", text)
			}
			if strings.Contains(text, "REACHED-") {
				t.Errorf("a tenant's command reached a port of the cluster on loopback, with %s: %q", with, text)
			}
		})
	}
}
