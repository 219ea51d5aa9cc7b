package main

import (
	"fmt"
	"testing"

	"github.com/coder/acp-go-sdk"
)

// BenchmarkClusterTurn: one ping turn (prompt to answer, over WebSocket)
// of a session on a lone mm serve, and through a node of a two-node
// cluster to a session whose grain is on that node or on the other.
//
//	go test -run '^$' -bench ClusterTurn -benchtime 2000x ./cmd/mm
func BenchmarkClusterTurn(b *testing.B) {
	ctx := b.Context() // as long as -benchtime asks; go test's -timeout bounds a hang
	ping := func(b *testing.B, w *wireClient, sid acp.SessionId) {
		for b.Loop() {
			if res, err := w.ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
				b.Fatalf("ping: %v %v", res, err)
			}
		}
	}
	b.Run("no cluster", func(b *testing.B) {
		s := startServe(b, "")
		w := s.wire(b)
		res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(b), McpServers: []acp.McpServer{}})
		if err != nil {
			b.Fatal(err)
		}
		ping(b, w, res.SessionId)
	})
	c := &testCluster{nodes: startCluster(b, 2, "")}
	w := c.nodes[0].wire(b)
	project := c.nodes[0].project(b)
	// on is a new session whose grain is on node n: each run of a
	// sub-benchmark (-count) starts on an empty history, as the lone
	// server's does.
	on := func(b *testing.B, n int) acp.SessionId {
		return c.sessionOn(b, ctx, w, project, fmt.Sprintf("node %d", n), func(at int) bool { return at == n })
	}
	b.Run("grain on the client's node", func(b *testing.B) { ping(b, w, on(b, 0)) })
	b.Run("grain on another node", func(b *testing.B) { ping(b, w, on(b, 1)) })
}
