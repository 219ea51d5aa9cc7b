package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/coder/websocket"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/cutproxy"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/serve/servetest"
)

// hostOf is the host:port of a served mm's URL.
func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestClusterResumeOnAnotherNode: two nodes of a cluster behind a
// balancer (a proxy the test points at one node, then at the other). The
// network drops for a second in the middle of a streaming turn, and when
// it comes back the balancer sends the client to the other node, which
// holds none of the connection's state: it passes the resume on to the
// node that does. Through mm connect the editor gets every word once, in
// order, and end_turn, with no error, and the next turn goes the same
// way; over streamable HTTP the stream resumed through the other node gets
// every event after its Last-Event-ID once. A connection whose node is no
// member is answered 404, as an unknown one, and a request marked as
// passed on already is not passed on again.
func TestClusterResumeOnAnotherNode(t *testing.T) {
	nodes := startClusterScript(t, 2, scriptedModel, countScript(), "")
	a, b := nodes[0].served, nodes[1].served
	t.Run("websocket", func(t *testing.T) {
		conn, p := behindProxy(t, a, "30s")
		countThroughDrop(t, conn, a.project(t), "websocket", func() {
			p.Cut()
			p.Retarget(hostOf(t, b.ws))
			time.Sleep(time.Second)
			p.Restore()
		}, nil)
		if !strings.Contains(b.stderr.String(), "its upgrade goes on to") {
			t.Errorf("the other node did not pass the resume on:\n%s", b.stderr.String())
		}
		if !strings.Contains(a.stderr.String(), "resumed after frame") {
			t.Errorf("the node holding the connection did not log the resume:\n%s", a.stderr.String())
		}
	})
	t.Run("http", func(t *testing.T) {
		httpStreamResumes(t, a, b, func(p *cutproxy.Proxy) {
			p.Cut()
			p.Retarget(hostOf(t, b.url))
			time.Sleep(time.Second)
			p.Restore()
		})
	})
	t.Run("gone", func(t *testing.T) {
		ctx := testwait.Context(t)
		for _, c := range []struct {
			name string
			h    http.Header
		}{
			{"a node that is no member", http.Header{"Acp-Connection-Id": {"0b6f2c1e-4d3a-4f5e-8a9b-1c2d3e4f5a6b.nosuchnode"}, "Last-Event-ID": {"0"}}},
			{"marked as passed on", http.Header{"Acp-Connection-Id": {"0b6f2c1e-4d3a-4f5e-8a9b-1c2d3e4f5a6b." + tagOf(t, a)}, "Last-Event-ID": {"0"}, "Mm-Forwarded-By": {"x"}}},
		} {
			c.h.Set("Authorization", "Bearer "+serveToken)
			_, resp, err := websocket.Dial(ctx, b.ws, &websocket.DialOptions{HTTPHeader: c.h})
			if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s: %v %v, want 404", c.name, resp, err)
			}
		}
	})
}

// tagOf is the tag a node puts at the end of its connections' ids: that
// of a streamable HTTP connection opened on it.
func tagOf(t *testing.T, s *served) string {
	t.Helper()
	resp := ssePost(t, s.url, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	resp.Body.Close()
	id := resp.Header.Get("Acp-Connection-Id")
	i := strings.LastIndexByte(id, '.')
	if i < 0 {
		t.Fatalf("a node's connection id %q names no node", id)
	}
	return id[i+1:]
}

// toNode sends every request that names a connection to host, as a
// balancer without affinity may.
type toNode struct {
	rt   http.RoundTripper
	host string
}

func (b toNode) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.host != "" && r.Header.Get("Acp-Connection-Id") != "" {
		r = r.Clone(r.Context())
		r.URL.Host, r.Host = b.host, b.host
	}
	return b.rt.RoundTrip(r)
}

// BenchmarkClusterHTTPForwarded: one ping turn over streamable HTTP (the
// prompt's POST, its answer on the session's SSE stream) of a connection
// opened on node 0 of a two-node cluster, its requests sent to node 0,
// or all sent to node 1, which passes each on to node 0 (a balancer
// without affinity).
//
//	go test -run '^$' -bench ClusterHTTPForwarded -benchtime 1000x ./cmd/mm
func BenchmarkClusterHTTPForwarded(b *testing.B) {
	ctx := b.Context()
	nodes := startClusterScript(b, 2, scriptedModel, serveScript, "")
	for _, c := range []struct {
		name string
		host string
	}{
		{"to the node that holds it", ""},
		{"through the other node", strings.TrimPrefix(strings.TrimSuffix(nodes[1].url, "/acp"), "http://")},
	} {
		b.Run(c.name, func(b *testing.B) {
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			st := servetest.DialHTTP(nodes[0].url, serveToken, &http.Client{Transport: toNode{rt: tr, host: c.host}})
			conn := acptest.Dial(acptest.NewClient(), st, st)
			defer st.Close()
			if _, err := conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
				b.Fatal(err)
			}
			res, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: nodes[0].project(b), McpServers: []acp.McpServer{}})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if r, err := conn.Ask(ctx, res.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
					b.Fatalf("ping: %v %v", r, err)
				}
			}
		})
	}
}
