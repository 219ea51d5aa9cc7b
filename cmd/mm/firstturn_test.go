package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
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
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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
