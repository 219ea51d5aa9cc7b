package protocol_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/store"
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
	benchTurnsOn(b, conn, ctx, prompt)
}

// benchTurnsOn times prompt's turns in one session of conn.
func benchTurnsOn(b *testing.B, conn *acptest.Conn, ctx context.Context, prompt string) {
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

// history200 writes a session file with a 200-message history (50 turns,
// each a question, a tool call, its ~500-byte output and an answer) and
// returns its id.
func history200(b *testing.B, cwd string) string {
	b.Helper()
	h := []history.Message{{Role: history.RoleSystem, Content: "system"}}
	out := strings.Repeat("output line of a command\n", 20)
	for i := 0; i < 50; i++ {
		id := fmt.Sprintf("t%d", i)
		h = append(h,
			history.Message{Role: history.RoleUser, Content: fmt.Sprintf("question %d: run the tests of package %d", i, i)},
			history.Message{Role: history.RoleAssistant, Content: "Running them.", ToolCalls: []history.ToolCall{{ID: id, Name: "bash", Arguments: `{"command":"go test ./..."}`}}},
			history.Message{Role: history.RoleTool, ToolCallID: id, Name: "bash", Content: out, CallRef: "call_" + id, Title: "bash: go test ./...", Kind: "execute", RawInput: map[string]any{"command": "go test ./..."}},
			history.Message{Role: history.RoleAssistant, Content: "All tests pass."},
		)
	}
	sid := "20260101-000000-0000beef"
	data, err := store.Marshal(&store.File{ID: sid, Cwd: cwd, Created: time.Now(), Updated: time.Now(), Provenance: store.Provenance{SessionID: sid, Kind: "root"}, History: h})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.WriteAtomic(store.Path(cwd, ".mm/sessions", sid), data); err != nil {
		b.Fatal(err)
	}
	return sid
}

// history200In stores history200's session in the Postgres database at
// url, and returns its id.
func history200In(b *testing.B, url, cwd string) string {
	b.Helper()
	sid := history200(b, cwd)
	s, err := store.OpenPostgres(context.Background(), url, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	f, _, err := store.NewFileStore(".mm/sessions", nil, nil, nil).Load(context.Background(), cwd, sid)
	if err != nil {
		b.Fatal(err)
	}
	data, err := store.Marshal(f)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Create(context.Background(), cwd, sid, data); err != nil {
		b.Fatal(err)
	}
	return sid
}

// BenchmarkPersistedTurn200: a ping → pong turn of a session that already
// holds 200 messages, with persistence on: the reply waits for the session
// file (encode, write, fsync, rename). Compare BenchmarkPongTurnInProcess.
func BenchmarkPersistedTurn200(b *testing.B) {
	conn, ctx := benchAgent(b, func(c *configs.Config) { c.Sessions.Enabled = true })
	cwd := b.TempDir()
	sid := acp.SessionId(history200(b, cwd))
	if _, err := conn.ResumeSession(ctx, acp.ResumeSessionRequest{SessionId: sid, Cwd: cwd}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if res, err := conn.Ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkPersistedTurn200Postgres is BenchmarkPersistedTurn200 with the
// session in Postgres (store.url, the package's throwaway server): the
// reply waits for encode and a fenced UPDATE of the row.
func BenchmarkPersistedTurn200Postgres(b *testing.B) {
	url := pg.URL(b)
	cwd := b.TempDir()
	sid := acp.SessionId(history200In(b, url, cwd))
	conn, ctx := benchAgent(b, func(c *configs.Config) { c.Sessions.Enabled = true; c.Store.URL = url })
	if _, err := conn.ResumeSession(ctx, acp.ResumeSessionRequest{SessionId: sid, Cwd: cwd}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if res, err := conn.Ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkLoadReplay200: session/load of a 200-message session from disk,
// replay included, until the response; the session is closed between loads
// so each one reads the file.
func BenchmarkLoadReplay200(b *testing.B) {
	conn, ctx := benchAgent(b, func(c *configs.Config) { c.Sessions.Enabled = true })
	cwd := b.TempDir()
	sid := acp.SessionId(history200(b, cwd))
	for i := 0; i < b.N; i++ {
		if _, err := conn.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: cwd, McpServers: []acp.McpServer{}}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := conn.CloseSession(ctx, acp.CloseSessionRequest{SessionId: sid}); err != nil {
			b.Fatal(err)
		}
		conn.Client.Reset()
		b.StartTimer()
	}
}

// BenchmarkCloseReturnsMemory opens 1,000 sessions that each ran a turn,
// closes them all, and reports the heap still held per closed session.
func BenchmarkCloseReturnsMemory(b *testing.B) {
	conn, ctx := benchAgent(b, nil)
	conn.Stdout.Off()
	cwd := b.TempDir()
	const n = 1000
	ids := make([]acp.SessionId, n)
	round := func() (open uint64) {
		for i := range ids {
			s, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
			if err != nil {
				b.Fatal(err)
			}
			ids[i] = s.SessionId
			if _, err := conn.Ask(ctx, s.SessionId, "ping"); err != nil {
				b.Fatal(err)
			}
		}
		conn.Client.Reset()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		for _, id := range ids {
			if _, err := conn.CloseSession(ctx, acp.CloseSessionRequest{SessionId: id}); err != nil {
				b.Fatal(err)
			}
		}
		return m.HeapAlloc
	}
	// A first round grows the maps and buffers that stay at their high-water
	// mark (protoactor's process registry, the session table); the second
	// is measured against the state it left.
	round()
	var base, closed runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	openHeap := round()
	runtime.GC()
	runtime.ReadMemStats(&closed)
	for b.Loop() {
	}
	b.ReportMetric(float64(int64(openHeap)-int64(base.HeapAlloc))/n, "B/open-session")
	b.ReportMetric(float64(int64(closed.HeapAlloc)-int64(base.HeapAlloc))/n, "B/closed-session")
}

// BenchmarkShutdown200Busy: stdin closes while 200 sessions each run a
// `sleep 30` command; the figure is the time until the agent has stopped
// every session, killed every command and returned.
func BenchmarkShutdown200Busy(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		conn, ctx := benchAgent(b, func(c *configs.Config) { c.Turns.Concurrency = 200 })
		cwd := b.TempDir()
		var sids []acp.SessionId
		for j := 0; j < 200; j++ {
			s, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
			if err != nil {
				b.Fatal(err)
			}
			sids = append(sids, s.SessionId)
		}
		for _, sid := range sids {
			go func() { _, _ = conn.Ask(ctx, sid, "sleep") }()
		}
		for _, sid := range sids {
			if err := conn.Client.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool {
				return u.ToolCallUpdate != nil && u.ToolCallUpdate.Status != nil && *u.ToolCallUpdate.Status == acp.ToolCallStatusInProgress
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := conn.Close(30 * time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewSessionWithSlowMCP: session/new with three MCP servers that
// never answer; the response does not wait for them (they connect in the
// background).
func BenchmarkNewSessionWithSlowMCP(b *testing.B) {
	conn, ctx := benchAgent(b, nil)
	cwd := b.TempDir()
	slow := func(name string) acp.McpServer {
		return acp.McpServer{Stdio: &acp.McpServerStdio{Name: name, Command: "sleep", Args: []string{"30"}, Env: []acp.EnvVariable{}}}
	}
	servers := []acp.McpServer{slow("a"), slow("b"), slow("c")}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: servers})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := conn.CloseSession(ctx, acp.CloseSessionRequest{SessionId: s.SessionId}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkPongTurnOverHTTP: one "ping" → "pong" turn through the openai
// provider against the test server over loopback HTTP, with mm's tool
// definitions in every request: what a turn costs against a local server
// that answers at once (the server's own work included).
func BenchmarkPongTurnOverHTTP(b *testing.B) {
	srv, model := scriptServer(&testing.T{}, benchScript)
	defer srv.Close()
	cfg := configs.Default()
	cfg.Model.BaseURL = srv.URL()
	conn, err := acptest.InProcess(cfg, model)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(5 * time.Second)
	ctx := context.Background()
	if _, err := conn.Init(ctx); err != nil {
		b.Fatal(err)
	}
	benchTurnsOn(b, conn, ctx, "ping")
}
