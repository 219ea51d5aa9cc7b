package protocol_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/protocol"
	"github.com/mm-agent/mm/protocol/acptest"
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
	conn, err := acptest.InProcessWith(protocol.Options{Config: cfg, Model: model, Probe: probe})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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

// eventually waits up to 5 s for ok.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 5 s", what)
		}
	}
}
