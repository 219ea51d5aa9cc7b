package stress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
)

// TestServedOverWebSocket: a small run against a real `mm serve` the run
// starts (-serve), over one WebSocket connection and over two with every
// kind of turn: the same checks as over pipes pass, and the memory figures
// come from the server's /metrics.
func TestServedOverWebSocket(t *testing.T) {
	testwait.Short(t, "runs that need the mm binary built")
	for _, tc := range []struct {
		name  string
		conns int
		mix   bool
	}{
		{"one connection", 1, false},
		{"two connections, every kind of turn", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			c.Sessions, c.Turns, c.Concurrency = 20, 3, 8
			if tc.mix {
				c.Bash, c.Edit, c.Ask, c.Cancel, c.Fail = 0.15, 0.15, 0.15, 0.15, 0.1
			}
			c.Serve, c.Conns = binary(t, "mm"), tc.conns
			r, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			r.Human(testWriter{t})
			if !r.OK() || r.Turns != 20*3 || r.Connections != tc.conns || r.Latency.Count == 0 {
				t.Fatal("run not OK")
			}
			if tc.mix && r.CancelLatency.Count == 0 {
				t.Error("no turn was cancelled")
			}
			// The server's CPU time comes in 10 ms ticks: 60 plain turns
			// may take less.
			if tc.mix && r.CPUPerTurn <= 0 || r.HarnessCPUPerTurn <= 0 {
				t.Errorf("CPU figures missing: %+v", r)
			}
			if r.RSSStart <= 0 || r.RSSConnected <= 0 || r.RSSIdle <= 0 || r.PeakRSS <= 0 || r.RSSAfterClose <= 0 {
				t.Errorf("memory figures missing: %+v", r)
			}
			// The run started the server: its memory is read as the
			// system counts it, not from /metrics every 100 ms.
			if !strings.Contains(r.Memory, "(/proc)") {
				t.Errorf("the memory of the run's own server came from %q", r.Memory)
			}
		})
	}
}

// TestServedByURL: -url drives an mm serve started apart, with the config
// -write-config gives it and the sessions' folders in its root (-dir); a
// wrong token fails the run at once, saying so.
func TestServedByURL(t *testing.T) {
	testwait.Short(t, "runs that need the mm binary built")
	dir := t.TempDir()
	c := Defaults()
	c.Sessions, c.Turns, c.Concurrency = 10, 2, 4
	cfg, err := WriteServeConfig(c, dir)
	if err != nil {
		t.Fatal(err)
	}
	const token = "served-by-url-token-0123456789"
	p, err := startServeProc(context.Background(), binary(t, "mm"), cfg, dir, "", token)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.stop(); err != nil {
			t.Error(err)
		}
	}()
	c.URL, c.Dir, c.Conns = p.url, dir, 2

	c.Token = "not-the-token-0123456789"
	if _, err := Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong token: %v, want a 401", err)
	}

	c.Token = token
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Turns != 10*2 {
		r.Human(testWriter{t})
		t.Fatal("run not OK")
	}
}

// TestParseMetrics: the server's figures are read from the Prometheus
// text format; the cores may be missing, the memory and goroutines not.
func TestParseMetrics(t *testing.T) {
	const all = "# TYPE go_goroutines gauge\ngo_goroutines 14\n# TYPE go_sched_gomaxprocs_threads gauge\ngo_sched_gomaxprocs_threads 2\n" +
		"# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 2.3199744e+07\n" +
		"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.25\n" +
		"# TYPE mm_connections_open gauge\nmm_connections_open{transport=\"websocket\"} 0\n"
	m, err := parseMetrics(strings.NewReader(all))
	if err != nil || m[metricRSS] != 23199744 || m[metricGoroutines] != 14 || m[metricProcs] != 2 || m[metricCPU] != 1.25 {
		t.Errorf("all: %v, %v", m, err)
	}
	noProcs := strings.Replace(all, "go_sched_gomaxprocs_threads 2\n", "", 1)
	if m, err := parseMetrics(strings.NewReader(noProcs)); err != nil || m[metricProcs] != 0 {
		t.Errorf("without the cores: %v, %v", m, err)
	}
	noRSS := strings.Replace(all, "process_resident_memory_bytes 2.3199744e+07\n", "", 1)
	if _, err := parseMetrics(strings.NewReader(noRSS)); err == nil {
		t.Error("without the memory: no error")
	}
}

// TestServeConfigTakesTheRun: the config a served mm gets (-serve,
// -write-config) takes every connection and every session of the run,
// all under the run's one token: the standard run opens 1,000 sessions,
// past serve.maxSessionsPerToken's default.
func TestServeConfigTakesTheRun(t *testing.T) {
	c := Defaults()
	c.Conns = 300
	path, err := WriteServeConfig(c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Serve.MaxSessionsPerToken < c.Sessions || cfg.Serve.MaxConnections < c.Conns {
		t.Errorf("serve: %d sessions per token, %d connections; the run opens %d and %d",
			cfg.Serve.MaxSessionsPerToken, cfg.Serve.MaxConnections, c.Sessions, c.Conns)
	}
}

// TestFrames: over a WebSocket each text frame is one message, each way:
// the harness's calls go out as frames and their answers come back as
// frames, updates reach their session's handler, an empty frame is
// skipped, and a binary frame ends the connection, saying so.
func TestFrames(t *testing.T) {
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		typ, req, err := ws.Read(ctx)
		if err != nil || typ != websocket.MessageText {
			t.Errorf("the call's frame: %v %v", typ, err)
			return
		}
		got <- string(req)
		for _, f := range []string{
			`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"re: ping"}}}}`,
			" ",
			`{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}`,
		} {
			if err := ws.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
				t.Error(err)
				return
			}
		}
		_ = ws.Write(ctx, websocket.MessageBinary, []byte(`{}`))
		_, _, _ = ws.Read(ctx) // until the client goes
	}))
	defer srv.Close()
	ctx := testwait.Context(t)
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var updates []string
	c := newRPC(frames(ws), func(sid string, u *update) {
		text, _ := u.text()
		updates = append(updates, sid+"|"+u.Kind+"|"+text)
	}, nil)
	stop, err := c.prompt(ctx, "s1", "ping")
	if err != nil || stop != "end_turn" {
		t.Fatalf("the prompt: %q, %v", stop, err)
	}
	if req := <-got; req != `{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"ping"}]}}` {
		t.Errorf("the call's frame: %s", req)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		t.Fatal("a binary frame did not end the connection")
	}
	if !errors.Is(c.err, errBinaryFrame) {
		t.Errorf("the end: %v", c.err)
	}
	_ = c.close()
	if fmt.Sprint(updates) != "[s1|agent_message_chunk|re: ping]" {
		t.Errorf("updates: %q", updates)
	}
}

// TestRunLeavesTheUsersStateAlone: the mm a run starts, over pipes and
// served, keep their state (the folders' owners, the index of project
// folders, the session key) in the run's folder: the user's state folder
// is as the run found it. Runs on the user's own had grown its record of
// folders' owners by a few hundred folders each, which every claim reads
// and writes whole.
func TestRunLeavesTheUsersStateAlone(t *testing.T) {
	testwait.Short(t, "runs that need the mm binary built")
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"over pipes", func(c *Config) { c.Procs, c.MM, c.Persist = 1, binary(t, "mm"), true }},
		{"served", func(c *Config) { c.Serve = binary(t, "mm") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			users := t.TempDir()
			t.Setenv("XDG_STATE_HOME", users)
			c := Defaults()
			c.Sessions, c.Turns, c.Concurrency = 4, 1, 2
			tc.set(&c)
			r, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK() || r.Turns != 4 {
				r.Human(testWriter{t})
				t.Fatal("run not OK")
			}
			entries, err := os.ReadDir(users)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				t.Errorf("the run wrote %s in the user's state folder", e.Name())
			}
		})
	}
}
