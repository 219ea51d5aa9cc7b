package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/testwait"
)

// BenchmarkFirstTurn measures what an editor user feels when opening mm:
// each op starts `mm -acp` against the local test server (zero latency),
// opens a session, waits as a person would before typing (100 ms), then
// times the first "ping" turn, the second at once, and a third after
// another 100 ms pause. It reports the medians as first-ms, second-ms and
// paused-ms: the first is fairly compared with the third, since a turn
// after a pause also pays for waking an idle process. ns/op is the whole
// op and means little.
//
//	go test ./cmd/mm -run '^$' -bench FirstTurn -benchtime 30x
func BenchmarkFirstTurn(b *testing.B) {
	var first, second, paused []float64
	for b.Loop() {
		b.StopTimer() // a server per op: each process starts with nothing pooled
		conn, cmd, _ := startMMScript(b, script, "  contextWindow: 100000\n")
		b.StartTimer()
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
		if _, err := conn.Init(ctx); err != nil {
			b.Fatal(err)
		}
		sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: b.TempDir(), McpServers: []acp.McpServer{}})
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		for _, into := range []*[]float64{&first, &second, &paused} {
			if into == &paused {
				time.Sleep(100 * time.Millisecond)
			}
			start := time.Now()
			if res, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
				b.Fatalf("%v %v", res, err)
			}
			*into = append(*into, float64(time.Since(start).Microseconds())/1000)
		}
		cancel()
		_ = conn.Close(5 * time.Second)
		_ = cmd.Wait()
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(median(first), "first-ms")
	b.ReportMetric(median(second), "second-ms")
	b.ReportMetric(median(paused), "paused-ms")
}

// BenchmarkPromptAtOnce: a fresh process, initialize, session/new, and a
// prompt sent as soon as session/new is answered, as an editor that opens
// a thread with its question does; model.warmUp on and off. It reports
// the medians of session/new (new-ms) and of the turn (first-ms). The
// model server's window is not configured, so it is probed as for a
// default config. The warm-up must cost neither figure anything:
//
//	go test ./cmd/mm -run '^$' -bench PromptAtOnce -benchtime 15x
func BenchmarkPromptAtOnce(b *testing.B) {
	for _, warm := range []bool{true, false} {
		b.Run(fmt.Sprintf("warmUp=%t", warm), func(b *testing.B) {
			var news, firsts []float64
			for b.Loop() {
				b.StopTimer()
				conn, cmd, _ := startMMScript(b, script, fmt.Sprintf("  warmUp: %t\n", warm))
				b.StartTimer()
				ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
				if _, err := conn.Init(ctx); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: b.TempDir(), McpServers: []acp.McpServer{}})
				if err != nil {
					b.Fatal(err)
				}
				news = append(news, float64(time.Since(start).Microseconds())/1000)
				start = time.Now()
				if res, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
					b.Fatalf("%v %v", res, err)
				}
				firsts = append(firsts, float64(time.Since(start).Microseconds())/1000)
				cancel()
				_ = conn.Close(5 * time.Second)
				_ = cmd.Wait()
			}
			median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
			b.ReportMetric(median(news), "new-ms")
			b.ReportMetric(median(firsts), "first-ms")
		})
	}
}
