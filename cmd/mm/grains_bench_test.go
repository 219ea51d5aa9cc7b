package main

import (
	"fmt"
	"testing"
	"time"

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

// BenchmarkClusterTurnPaired: the three turns of BenchmarkClusterTurn
// alternated in blocks of pairedBlock — pings to a lone mm serve, to a
// session on the client's node of a two-node cluster, through it to a
// session on the other node — each turn timed alone. The machine's
// swings (this one's move a run by ±15% in a minute) then fall on all
// three alike, while within a block each path runs warm, as a run of
// BenchmarkClusterTurn does; every session's history grows alike. near-x
// is the client's node over the lone server, far-added-µs what the
// other node adds to a turn; each op is one turn.
//
//	go test -run '^$' -bench ClusterTurnPaired -benchtime 6000x ./cmd/mm
func BenchmarkClusterTurnPaired(b *testing.B) {
	ctx := b.Context()
	lone := startServe(b, "")
	lw := lone.wire(b)
	ls, err := lw.NewSession(ctx, acp.NewSessionRequest{Cwd: lone.project(b), McpServers: []acp.McpServer{}})
	if err != nil {
		b.Fatal(err)
	}
	c := &testCluster{nodes: startCluster(b, 2, "")}
	w := c.nodes[0].wire(b)
	project := c.nodes[0].project(b)
	on := func(n int) acp.SessionId {
		return c.sessionOn(b, ctx, w, project, fmt.Sprintf("node %d", n), func(at int) bool { return at == n })
	}
	type path struct {
		w     *wireClient
		sid   acp.SessionId
		took  time.Duration
		turns int
	}
	paths := []*path{{w: lw, sid: ls.SessionId}, {w: w, sid: on(0)}, {w: w, sid: on(1)}}
	i := 0
	for b.Loop() {
		p := paths[i/pairedBlock%len(paths)]
		i++
		start := time.Now()
		if res, err := p.w.ask(ctx, p.sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
			b.Fatalf("ping: %v %v", res, err)
		}
		p.took += time.Since(start)
		p.turns++
	}
	if paths[2].turns == 0 {
		return // too few turns to say
	}
	per := func(p *path) float64 { return float64(p.took.Nanoseconds()) / 1e3 / float64(p.turns) }
	b.ReportMetric(per(paths[0]), "lone-µs/turn")
	b.ReportMetric(per(paths[1])/per(paths[0]), "near-x")
	b.ReportMetric(per(paths[2])-per(paths[0]), "far-added-µs")
}

// pairedBlock is how many turns BenchmarkClusterTurnPaired takes on one
// path before the next.
const pairedBlock = 50
