package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/llm/llmtest"
	"github.com/mm-agent/mm/protocol/acptest"
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
	sc, err := llm.ParseScript([]byte(script))
	if err != nil {
		b.Fatal(err)
	}
	srv := llmtest.NewServer(sc)
	defer srv.Close()
	dir := b.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf("model:\n  provider: openai\n  baseURL: %s\n  contextWindow: 100000\n", srv.URL())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	var first, second, paused []float64
	for b.Loop() {
		cmd := exec.Command(mmBin, "-acp", "-config", cfgPath)
		cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
		conn, err := acptest.Process(cmd)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if _, err := conn.Init(ctx); err != nil {
			b.Fatal(err)
		}
		sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: dir, McpServers: []acp.McpServer{}})
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
