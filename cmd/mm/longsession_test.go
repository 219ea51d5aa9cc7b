package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
)

// longScript answers every turn briefly and cannot summarise.
const longScript = `
rules:
  - match: "^Summarise the conversation"
    steps: [{error: "summariser down"}]
  - match: "turn"
    steps: [{text: "ok, noted."}]
usage: true
`

// BenchmarkLongSessionFailingCompaction is the run of issue 13: one
// session of a real `mm -acp`, b.N turns against the HTTP test server, a
// 6,000-token window and a summariser that always fails. Compression backs
// off, and the window cap keeps every request in bounds, so a turn costs
// the same at the end as after the cap is reached. It reports the mean
// turn of turns 100–1,100 (the cap is reached within the first 30) and of
// the last 1,000, mm's RSS growth between turn 100 and the end, and the
// server's view: requests refused over the window (must be 0) and
// compression tries.
//
//	go test ./cmd/mm -run '^$' -bench LongSession -benchtime 10000x
func BenchmarkLongSessionFailingCompaction(b *testing.B) {
	const window = 6000
	conn, cmd, srv := startMMScript(b, longScript, fmt.Sprintf("  contextWindow: %d\ncontext:\n  threshold: 0.7\n  keepLastTurns: 1\n", window))
	srv.SetContextWindow(window)
	ctx := b.Context()
	if _, err := conn.Init(ctx); err != nil {
		b.Fatal(err)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: b.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		b.Fatal(err)
	}
	padding := strings.Repeat("some words of a question ", 8)
	lat := make([]time.Duration, 0, b.N)
	var rssCapped int
	i := 0
	for b.Loop() {
		start := time.Now()
		if _, err := conn.Ask(ctx, sess.SessionId, fmt.Sprintf("turn %d %s", i, padding)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if i == 100 {
			rssCapped = vmRSS(b, cmd.Process.Pid)
		}
		if i%200 == 0 {
			conn.Client.Reset() // the client keeps what it was sent
		}
		i++
	}
	if len(lat) < 2200 {
		return // too short a run to compare
	}
	mean := func(d []time.Duration) float64 {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return float64(sum.Microseconds()) / float64(len(d)) / 1000
	}
	b.ReportMetric(mean(lat[100:1100]), "early-ms/turn")
	b.ReportMetric(mean(lat[len(lat)-1000:]), "late-ms/turn")
	b.ReportMetric(float64(vmRSS(b, cmd.Process.Pid)-rssCapped)/1024, "rss-growth-MB")
	b.ReportMetric(float64(srv.Oversized()), "oversized")
	b.ReportMetric(float64(strings.Count(conn.Stderr.String(), "auto-compact — [compact: failed")), "compact-tries")
}
