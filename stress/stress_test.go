package stress

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/mm-agent/mm/internal/mmbuild"
	"github.com/mm-agent/mm/internal/testwait"
)

// bins is where mm, mm-node (which mm serve runs for a cluster) and
// mmstress are built, once, by the first test that
// needs them (binary): under -short none does, and nothing is built.
var (
	bins      string
	buildOnce sync.Once
	buildErr  error
)

// binary is the path of the mm or mmstress binary, built on first use.
func binary(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		for _, b := range []string{"mm", "mm-node", "mmstress"} {
			if err := mmbuild.Build(filepath.Join(bins, b), "../cmd/"+b); err != nil {
				buildErr = err
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(bins, name)
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mmstress-bin")
	if err != nil {
		panic(err)
	}
	bins = dir
	code := 0
	func() {
		defer os.RemoveAll(dir)
		// goleak after the run: what the harness and the in-process agent
		// started must be gone.
		goleak.VerifyTestMain(exitCode{&code, m})
	}()
	os.Exit(code)
}

// exitCode lets VerifyTestMain run m while TestMain still cleans up.
type exitCode struct {
	code *int
	m    *testing.M
}

func (e exitCode) Run() int { *e.code = e.m.Run(); return *e.code }

func mix() Config {
	c := Defaults()
	c.Sessions, c.Turns, c.Concurrency = 24, 6, 8
	c.Bash, c.Edit, c.Ask, c.Cancel, c.Fail = 0.15, 0.15, 0.15, 0.1, 0.1
	return c
}

// TestInProcessMix runs every kind of turn and expects every check to pass:
// nothing lost, duplicated, reordered or misdelivered, each turn ending as
// its kind calls for, the failed model calls counted as such, and nothing
// left after close.
func TestInProcessMix(t *testing.T) {
	r, err := Run(context.Background(), mix())
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		r.Human(testWriter{t})
		t.Fatal("run not OK")
	}
	if r.Turns != 24*6 || r.CancelLatency.Count == 0 || r.Latency.Count == 0 || r.FirstChunk.Count == 0 {
		t.Errorf("report = %+v", r)
	}
	failed := int64(0)
	for k, n := range r.Errors {
		if len(k) > 9 && k[:9] == "expected:" {
			failed += n
		}
	}
	if failed == 0 {
		t.Error("no turn met the failing model")
	}
	// The heap figure is a difference of two GC'd heaps: with 24 sessions
	// it may round to nothing, so only RSS is required.
	if r.PeakRSS <= 0 || r.RSSIdle <= 0 {
		t.Errorf("memory figures missing: %+v", r)
	}
}

// TestSubprocessesMix is the same over real pipes to two `mm -acp`.
func TestSubprocessesMix(t *testing.T) {
	testwait.Short(t, "runs that need the mm binary built")
	c := mix()
	c.Procs, c.MM = 2, binary(t, "mm")
	c.Persist = true
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Turns != 24*6 || r.PeakRSS <= 0 || r.CPUPerTurn <= 0 {
		r.Human(testWriter{t})
		t.Fatal("run not OK")
	}
}

// TestChecksCatchBrokenStreams feeds the checker broken answers.
func TestChecksCatchBrokenStreams(t *testing.T) {
	p := "ping s1 t2"
	for _, tc := range []struct {
		got  string
		want Counts
	}{
		{"re: ping s1 t2 w1 w2 w3", Counts{}},
		{"re: ping s1 t2 w1 w3", Counts{Lost: 1}},
		{"re: ping s1 t2 w1 w2 w2 w3", Counts{Duplicated: 1}},
		{"re: ping s1 t2 w2 w1 w3", Counts{OutOfOrder: 1}},
		{"re: ping s9 t2 w1 w2 w3", Counts{Foreign: 1}},
		{"", Counts{Lost: 3}},
		{"re: ping", Counts{Foreign: 1}},
	} {
		if got := checkText(tc.got, p, 3); got != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.got, got, tc.want)
		}
	}
	tr := &tracker{id: "s1"}
	tr.update(&update{Kind: "agent_message_chunk"}) // between turns
	tr.begin(kindBash, p)
	tr.update(&update{Kind: "tool_call_update", ToolCallID: "call_9", Status: "completed"})
	tr.update(&update{Kind: "tool_call", ToolCallID: "call_1", Status: "pending"})
	tr.update(&update{Kind: "tool_call_update", ToolCallID: "call_1", Status: "completed"})
	tr.update(&update{Kind: "tool_call_update", ToolCallID: "call_1", Status: "in_progress"})
	tr.end("end_turn", nil, 3)
	// Foreign: the chunk between turns and the unannounced call; out of
	// order: completed then in_progress; lost: the three words and the
	// call that never completed.
	if tr.counts.Foreign != 2 || tr.counts.OutOfOrder != 1 || tr.counts.Lost != 4 {
		t.Errorf("tracker counts = %+v", tr.counts)
	}
}

// TestEchoServers: both baselines answer with the params.
func TestEchoServers(t *testing.T) {
	for name, serve := range map[string]func(io.Reader, io.Writer) error{"raw": ServeEcho, "sdk": ServeEchoSDK} {
		t.Run(name, func(t *testing.T) {
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			done := make(chan struct{})
			go func() { _ = serve(inR, outW); outW.Close(); close(done) }()
			c := newRPC(lines(inW, outR))
			res, err := c.call(context.Background(), "_mm/echo", []byte(`{"a":[1,2]}`))
			if err != nil || string(res) != `{"a":[1,2]}` {
				t.Errorf("echo = %s, %v", res, err)
			}
			c.close()
			inW.Close()
			<-done
			<-c.done
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// BenchmarkTurnsOverPipes: turns/s of one `mm -acp` over real pipes, 1,000
// sessions, 64 slots, the harness's client (b.N turns).
func BenchmarkTurnsOverPipes(b *testing.B) {
	c := Defaults()
	c.Procs, c.MM = 1, binary(b, "mm")
	c.Turns = max(1, b.N/c.Sessions)
	b.ResetTimer()
	r, err := Run(context.Background(), c)
	if err != nil || !r.OK() {
		b.Fatal(err, r)
	}
	b.ReportMetric(r.TurnsPerSec, "turns/s")
}

// BenchmarkTurnsOverWebSocket is BenchmarkTurnsOverPipes against one `mm
// serve` over one WebSocket connection.
func BenchmarkTurnsOverWebSocket(b *testing.B) {
	c := Defaults()
	c.Serve = binary(b, "mm")
	c.Turns = max(1, b.N/c.Sessions)
	b.ResetTimer()
	r, err := Run(context.Background(), c)
	if err != nil || !r.OK() {
		b.Fatal(err, r)
	}
	b.ReportMetric(r.TurnsPerSec, "turns/s")
}

// BenchmarkEchoOverPipes is the baseline: JSON-RPC echo on acp-go-sdk's
// connection, same client, same pipes, same concurrency.
func BenchmarkEchoOverPipes(b *testing.B) {
	r, err := RunEcho(context.Background(), binary(b, "mmstress"), "sdk", 1000, max(1, b.N/1000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.RequestsPerS, "requests/s")
}

// BenchmarkRawEchoOverPipes is the floor: a hand-rolled echo.
func BenchmarkRawEchoOverPipes(b *testing.B) {
	r, err := RunEcho(context.Background(), binary(b, "mmstress"), "raw", 1000, max(1, b.N/1000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.RequestsPerS, "requests/s")
}

// BenchmarkTurnsInProcess: the standard run's shape in this process.
func BenchmarkTurnsInProcess(b *testing.B) {
	c := Defaults()
	c.Turns = max(1, b.N/c.Sessions)
	b.ResetTimer()
	r, err := Run(context.Background(), c)
	if err != nil || !r.OK() {
		b.Fatal(err, r)
	}
	b.ReportMetric(r.TurnsPerSec, "turns/s")
}

// TestRPCReadsStrictly: the harness's reader decodes updates and responses,
// and a line that is not strictly valid JSON (here a raw control character
// in a string, which a lenient parser would take) counts as unreadable.
func TestRPCReadsStrictly(t *testing.T) {
	input := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"pong \u00e9"}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"bad` + "\x01" + `"}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"call_3","status":"completed","content":[{"type":"content"}]}}}
`
	pr, pw := io.Pipe()
	c := newRPC(lines(io.Discard, pr))
	var got []string
	c.onUpdate = func(sid string, u *update) {
		text, _ := u.text()
		got = append(got, fmt.Sprintf("%s|%s|%s|%s|%s", sid, u.Kind, text, u.ToolCallID, u.Status))
	}
	go func() {
		_, _ = io.WriteString(pw, input)
		pw.Close()
	}()
	<-c.done
	c.close()
	want := []string{"s1|agent_message_chunk|pong é||", "|unreadable|||", "s1|tool_call_update||call_3|completed"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("updates\n got %q\nwant %q", got, want)
	}
}
