package protocol_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/protocol/acptest"
)

const benchScript = `
rules:
  - match: "^ping$"
    steps: [{text: "pong"}]
  - match: "^bash true$"
    steps:
      - toolCalls: [{name: bash, args: {command: "true"}}]
      - {text: "pong"}
  - match: "^sleep$"
    steps:
      - toolCalls: [{name: bash, args: {command: "sleep 30"}}]
      - {text: "not reached"}
usage: true
`

// benchAgent is the in-process agent on the scripted provider: a model with
// zero latency and no server, so the figures are mm's own overhead.
func benchAgent(b *testing.B, edit func(*configs.Config)) (*acptest.Conn, context.Context) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte(benchScript), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := configs.Default()
	cfg.Model.Provider = "scripted"
	cfg.Model.Script = path
	if edit != nil {
		edit(cfg)
	}
	model, err := llm.New(llm.Config{Provider: "scripted", Script: path})
	if err != nil {
		b.Fatal(err)
	}
	conn, err := acptest.InProcess(cfg, model)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(5 * time.Second) })
	ctx := context.Background()
	if _, err := conn.Init(ctx); err != nil {
		b.Fatal(err)
	}
	return conn, ctx
}

func benchTurns(b *testing.B, prompt string) {
	conn, ctx := benchAgent(b, nil)
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: b.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// /new keeps the history short, so every turn costs the same.
		if res, err := conn.Ask(ctx, sess.SessionId, prompt); err != nil || res.StopReason != acp.StopReasonEndTurn {
			b.Fatalf("%v %v", res, err)
		}
		b.StopTimer()
		if _, err := conn.Ask(ctx, sess.SessionId, "/new"); err != nil {
			b.Fatal(err)
		}
		conn.Client.Reset()
		b.StartTimer()
	}
}

// BenchmarkPongTurnInProcess: one "ping" → "pong" turn against a zero-latency
// model, through the SDK client over in-memory pipes.
func BenchmarkPongTurnInProcess(b *testing.B) { benchTurns(b, "ping") }

// BenchmarkBashTrueTurnInProcess: the same turn with one `bash true` call
// between two model calls. Its difference from BenchmarkPongTurnInProcess is
// the cost of a tool round trip (one more model call included).
func BenchmarkBashTrueTurnInProcess(b *testing.B) { benchTurns(b, "bash true") }

// BenchmarkCancelWhileBashSleeps measures the time from session/cancel to
// the cancelled response while `sleep 30` runs in bash.
func BenchmarkCancelWhileBashSleeps(b *testing.B) {
	conn, ctx := benchAgent(b, nil)
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: b.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		b.Fatal(err)
	}
	sid := sess.SessionId
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		conn.Client.Reset()
		done := make(chan time.Time, 1)
		go func() {
			_, _ = conn.Ask(ctx, sid, "sleep")
			done <- time.Now()
		}()
		_ = conn.Client.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool {
			return u.ToolCallUpdate != nil && u.ToolCallUpdate.Status != nil && *u.ToolCallUpdate.Status == acp.ToolCallStatusInProgress
		})
		time.Sleep(time.Millisecond) // let bash start its sleep
		b.StartTimer()
		start := time.Now()
		_ = conn.Cancel(ctx, acp.CancelNotification{SessionId: sid})
		end := <-done
		total += end.Sub(start)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/cancel")
}

// BenchmarkIdleSessionHeap reports the heap held by each idle session.
func BenchmarkIdleSessionHeap(b *testing.B) {
	conn, ctx := benchAgent(b, nil)
	cwd := b.TempDir()
	const n = 2000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		if _, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}}); err != nil {
			b.Fatal(err)
		}
	}
	conn.Client.Reset()
	runtime.GC()
	runtime.ReadMemStats(&after)
	for b.Loop() {
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/session")
}
