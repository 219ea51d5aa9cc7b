package stress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mm-agent/mm/internal/mmbuild"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/jsonrpc"
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
			c := newRPC(lines(inW, outR), nil, nil)
			res, err := c.call(context.Background(), "_mm/echo", json.RawMessage(`{"a":[1,2]}`), "")
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
	var got []string
	c := newRPC(lines(io.Discard, pr), func(sid string, u *update) {
		text, _ := u.text()
		got = append(got, fmt.Sprintf("%s|%s|%s|%s|%s", sid, u.Kind, text, u.ToolCallID, u.Status))
	}, nil)
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

// fakeMM is the mm side of a harness connection on in-memory pipes: the
// test writes mm's lines and reads the harness's.
type fakeMM struct {
	t    *testing.T
	in   *io.PipeWriter // mm's output, the harness's input
	out  chan string    // the harness's lines
	conn *rpc
}

func newFakeMM(t *testing.T, onUpdate func(string, *update), onPermission func(string, string) string) *fakeMM {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	f := &fakeMM{t: t, in: inW, out: make(chan string, 16)}
	f.conn = newRPC(lines(outW, inR), onUpdate, onPermission)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			f.out <- sc.Text()
		}
		close(f.out)
	}()
	t.Cleanup(func() {
		inW.Close()
		<-f.conn.done
		_ = f.conn.close()
		outW.Close()
		for range f.out {
		}
	})
	return f
}

// send writes one of mm's lines.
func (f *fakeMM) send(line string) {
	f.t.Helper()
	if _, err := io.WriteString(f.in, line+"\n"); err != nil {
		f.t.Fatal(err)
	}
}

// next is the harness's next line.
func (f *fakeMM) next() string {
	f.t.Helper()
	select {
	case l, ok := <-f.out:
		if !ok {
			f.t.Fatal("the harness's side ended")
		}
		return l
	case <-time.After(testwait.Hang):
		f.t.Fatal("the harness wrote nothing")
	}
	return ""
}

// TestRPCDispatch: each of mm's messages goes where it belongs. Answers
// reach their own calls whatever their order, an error answer as the
// report says it; a session/update goes to its session's handler in
// order; a permission request is answered with the option the harness
// chose for its session and tool call (cancelled when none), any other
// request "Method not found"; the harness's prompts and cancels are ACP's
// bytes; calls waiting when mm goes get an error, and so do calls after.
func TestRPCDispatch(t *testing.T) {
	var mu sync.Mutex
	var updates, asked []string
	f := newFakeMM(t, func(sid string, u *update) {
		mu.Lock()
		text, _ := u.text()
		updates = append(updates, sid+"|"+u.Kind+"|"+text)
		mu.Unlock()
	}, func(sid, callID string) string {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, sid+"|"+callID)
		if sid == "s1" {
			return "allow"
		}
		return ""
	})
	ctx := testwait.Context(t)

	type answer struct {
		res json.RawMessage
		err error
	}
	a, b := make(chan answer, 1), make(chan answer, 1)
	go func() { res, err := f.conn.call(ctx, "a", json.RawMessage(`{}`), ""); a <- answer{res, err} }()
	first := f.next()
	go func() { res, err := f.conn.call(ctx, "b", json.RawMessage(`{}`), ""); b <- answer{res, err} }()
	second := f.next()
	if first != `{"jsonrpc":"2.0","id":1,"method":"a","params":{}}` || second != `{"jsonrpc":"2.0","id":2,"method":"b","params":{}}` {
		t.Fatalf("the calls: %s, %s", first, second)
	}
	f.send(`{"jsonrpc":"2.0","id":2,"result":{"n":2}}`)
	f.send(`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"scripted failure","data":{"error":"scripted failure","status":500}}}`)
	if r := <-b; r.err != nil || string(r.res) != `{"n":2}` {
		t.Errorf("b: %s, %v", r.res, r.err)
	}
	var re *rpcError
	if r := <-a; !errors.As(r.err, &re) || re.Code != -32603 || r.err.Error() != "scripted failure" {
		t.Errorf("a: %v", r.err)
	}

	f.send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"re: ping"}}}}`)
	f.send(`{"jsonrpc":"2.0","id":"p1","method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"call_1"},"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"}]}}`)
	if got := f.next(); got != `{"jsonrpc":"2.0","id":"p1","result":{"outcome":{"optionId":"allow","outcome":"selected"}}}` {
		t.Errorf("the permission allowed: %s", got)
	}
	f.send(`{"jsonrpc":"2.0","id":5,"method":"session/request_permission","params":{"sessionId":"s9","toolCall":{"toolCallId":"call_2"},"options":[]}}`)
	if got := f.next(); got != `{"jsonrpc":"2.0","id":5,"result":{"outcome":{"outcome":"cancelled"}}}` {
		t.Errorf("the permission refused: %s", got)
	}
	f.send(`{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"/etc/passwd"}}`)
	if got := f.next(); got != `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found","data":{"method":"fs/read_text_file"}}}` {
		t.Errorf("an unknown request: %s", got)
	}
	f.send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s2","update":{"sessionUpdate":"tool_call","toolCallId":"call_3","status":"pending"}}}`)
	f.send(`{"jsonrpc":"2.0","method":"_mm/unknown","params":{}}`) // a notification: nothing to answer

	if err := f.conn.cancel("s1"); err != nil {
		t.Fatal(err)
	}
	if got := f.next(); got != `{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}` {
		t.Errorf("the cancel: %s", got)
	}
	stop := make(chan answer, 1)
	go func() { s, err := f.conn.prompt(ctx, "s1", "ping s1 t0"); stop <- answer{json.RawMessage(s), err} }()
	if got := f.next(); got != `{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"ping s1 t0"}]}}` {
		t.Errorf("the prompt: %s", got)
	}
	f.send(`{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}`)
	if r := <-stop; r.err != nil || string(r.res) != "end_turn" {
		t.Errorf("the prompt's answer: %s, %v", r.res, r.err)
	}

	go func() { _, err := f.conn.call(ctx, "c", nil, ""); a <- answer{nil, err} }()
	f.next()
	f.in.Close()
	if r := <-a; r.err == nil || r.err.Error() != "peer disconnected before response" {
		t.Errorf("a call waiting when mm went: %v", r.err)
	}
	<-f.conn.done
	if _, err := f.conn.call(ctx, "d", nil, ""); err == nil || err.Error() != "peer disconnected: EOF" {
		t.Errorf("a call after: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"s1|agent_message_chunk|re: ping", "s2|tool_call|"}; fmt.Sprint(updates) != fmt.Sprint(want) {
		t.Errorf("updates %q, want %q", updates, want)
	}
	if want := []string{"s1|call_1", "s9|call_2"}; fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("permissions asked %q, want %q", asked, want)
	}
	if n := f.conn.extraAnswers(); n != 0 {
		t.Errorf("%d extra answers", n)
	}
}

// BenchmarkRPCReadUpdates: the harness's cost of one answer chunk read
// from a stream, parsed, checked and handed to its session's handler.
func BenchmarkRPCReadUpdates(b *testing.B) {
	const chunk = `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"20260101-000000-00000000","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"re: ping s12 t3 w1 w2 w3 w4 w5 w6 w7 w8"}}}}` + "\n"
	stream := bytes.Repeat([]byte(chunk), b.N)
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	c := newRPC(transport{src: jsonrpc.Lines(bytes.NewReader(stream), maxMessage), w: jsonrpc.NewLineWriter(io.Discard),
		close: func() error { return nil }}, func(string, *update) { n++ }, nil)
	<-c.done
	if n != b.N {
		b.Fatalf("%d updates of %d", n, b.N)
	}
}

// BenchmarkRPCPrompt: the harness's cost of a prompt, sent, answered and
// its stop reason read, against a peer that answers at once.
func BenchmarkRPCPrompt(b *testing.B) {
	pr, pw := io.Pipe()
	ids := make(chan jsonrpc.ID, 1)
	c := newRPC(transport{src: jsonrpc.Lines(pr, maxMessage), w: outFunc(func(o jsonrpc.Out) error { ids <- o.ID; return nil }),
		close: func() error { return nil }}, nil, nil)
	go func() {
		for id := range ids {
			_, _ = io.WriteString(pw, `{"jsonrpc":"2.0","id":`+id.String()+`,"result":{"stopReason":"end_turn"}}`+"\n")
		}
		pw.Close()
	}()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if stop, err := c.prompt(ctx, "20260101-000000-00000000", "ping s12 t3"); err != nil || stop != "end_turn" {
			b.Fatal(stop, err)
		}
	}
	b.StopTimer()
	close(ids)
	<-c.done
}

type outFunc func(jsonrpc.Out) error

func (f outFunc) Write(o jsonrpc.Out) error { return f(o) }
