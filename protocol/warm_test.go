package protocol_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
)

// TestSessionWarmsItsModel: the model's connection is open before the
// first prompt, which reuses it; so does the next session's first prompt.
// A window still unknown is probed again when a session is created.
func TestSessionWarmsItsModel(t *testing.T) {
	srv, _ := scriptServer(t, misbehaveScript)
	cfg := configs.Default()
	cfg.Model.BaseURL = srv.URL()
	cfg.Model.ContextWindow = 0
	model, err := llm.New(llm.Config{Provider: "openai", BaseURL: srv.URL(), Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	// The server is "down" for the probe at start: it answers 0, then 9000.
	var probes atomic.Int32
	probe := func(context.Context) int {
		if probes.Add(1) == 1 {
			return 0
		}
		return 9000
	}
	rec := &recorder{Model: model}
	conn, err := acptest.InProcessWith(app.Options{Config: cfg, Model: rec, Probe: probe})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(testwait.Hang)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	if _, err := conn.Init(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the probe at start", func() bool { return probes.Load() == 1 })

	for i := range 2 {
		sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		// The warm-up's request done, its connection is back in the pool
		// (while it is in flight, a prompt would open another).
		eventually(t, "a warm-up done", func() bool { return slices.Contains(rec.seen(), "warmed") })
		eventually(t, "a pooled connection", func() bool { return srv.Connections() == 1 })
		if i == 0 {
			eventually(t, "the probe at session/new", func() bool { return probes.Load() == 2 })
		}
		if _, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil {
			t.Fatal(err)
		}
		if n := srv.Connections(); n != 1 {
			t.Errorf("session %d: %d connections after its first prompt, want the warm one alone", i, n)
		}
		ups := conn.Client.Updates(sess.SessionId)
		if u := ups[len(ups)-1].UsageUpdate; u == nil || u.Size != 9000 {
			t.Errorf("session %d: last update %+v, want usage_update with the probed size 9000", i, u)
		}
	}
	if n := probes.Load(); n != 2 {
		t.Errorf("%d probes, want 2: none once the window is known", n)
	}
}

// eventually waits for ok, testwait.Hang at most.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(testwait.Hang); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, testwait.Hang)
		}
	}
}

// recorder is a model that notes, in order, its warm-ups and calls, and
// the probes of its window.
type recorder struct {
	llm.Model
	mu     sync.Mutex
	events []string
}

func (r *recorder) note(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recorder) Warm(ctx context.Context) {
	r.note("warm")
	r.Model.(llm.Warmer).Warm(ctx)
	r.note("warmed")
}

func (r *recorder) Stream(ctx context.Context, req llm.Request, emit func(llm.Delta)) (llm.Response, error) {
	r.note("call")
	return r.Model.Stream(ctx, req, emit)
}

// TestWarmUpUsesTimeNobodyWaitsOn: a prompt sent as soon as session/new is
// answered is served, and the window is probed once things are quiet; a
// prompt typed a moment later finds its model warmed and its connection
// open. Whether the prompt sent at once came within warmQuiet (25 ms) of
// session/new, and so ran before any warm-up, depends on the machine's
// speed: the order is logged, not asserted.
func TestWarmUpUsesTimeNobodyWaitsOn(t *testing.T) {
	srv, _ := scriptServer(t, misbehaveScript)
	cfg := configs.Default()
	cfg.Model.BaseURL = srv.URL()
	cfg.Model.ContextWindow = 0
	model, err := llm.New(llm.Config{Provider: "openai", BaseURL: srv.URL(), Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Model: model}
	probe := func(context.Context) int { rec.note("probe"); return 9000 }
	conn, err := acptest.InProcessWith(app.Options{Config: cfg, Model: rec, Probe: probe})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(testwait.Hang)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	if _, err := conn.Init(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the probe, once quiet", func() bool { return slices.Contains(rec.seen(), "probe") })
	if got := rec.seen(); got[0] != "call" || slices.Contains(got, "warm") {
		t.Logf("a prompt sent at once came after the warm-up had begun (a slow machine): %v", got)
	} else {
		t.Logf("a prompt sent at once ran first, and no warm-up followed: %v", got)
	}

	// A second model server, so that its connection is new: a prompt
	// typed after a pause finds it open.
	srv2, _ := scriptServer(t, misbehaveScript)
	model2, err := llm.New(llm.Config{Provider: "openai", BaseURL: srv2.URL(), Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	rec2 := &recorder{Model: model2}
	conn2, err := acptest.InProcessWith(app.Options{Config: cfg, Model: rec2, ContextWindow: 9000})
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(testwait.Hang)
	if _, err := conn2.Init(ctx); err != nil {
		t.Fatal(err)
	}
	sess2, err := conn2.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the warm-up of an idle session", func() bool { return slices.Contains(rec2.seen(), "warmed") })
	if _, err := conn2.Ask(ctx, sess2.SessionId, "ping"); err != nil {
		t.Fatal(err)
	}
	if got := rec2.seen(); !slices.Equal(got, []string{"warm", "warmed", "call"}) || srv2.Connections() != 1 {
		t.Fatalf("a prompt after a pause: %v with %d connection(s), want the warm-up first and its connection reused", got, srv2.Connections())
	}
}
