package serve_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/serve"
	"github.com/mm-agent/mm/serve/servetest"
)

// TestWebSocketClientLeaves: a client that said it will resume (mm
// connect: Acp-Resume: 1) and then closes its socket with a close frame,
// 1000, in the middle of a turn, has left: the connection ends at once,
// its turn with it, and a resume finds nothing (404). Only a socket that
// ends without the client's close frame is a drop the connection waits
// serve.resumeTimeout for. mm connect closes so when its editor goes away
// (cmd/mm's TestConnectEditorGone). The cancelled turn's answer, written
// after the close, fails: its writer deadlocked (wsConn.failed, called by
// writeFrame under wsOut.mu, took wsOut.mu again), as TestMain's leak
// check found, and the connection never ended when the close came first.
func TestWebSocketClientLeaves(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.ResumeTimeout = testwait.Hang })
	ctx := testwait.Context(t)
	h := http.Header{}
	h.Set("Acp-Resume", "1")
	ws, resp, err := servetest.DialWebSocket(ctx, e.ws, token, h)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Header.Get("Acp-Connection-Id")
	c := newClient(t, ws)
	sid := c.start(t, ctx)
	go func() { _, _ = c.ask(ctx, sid, "slow") }()
	if err := c.rec.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
		t.Fatal(err)
	}
	if err := ws.Close(); err != nil { // 1000, a normal closure
		t.Logf("close: %v", err)
	}
	waitFor(t, func() bool { return strings.Contains(e.stderr.String(), " closed: ") })
	log := e.stderr.String()
	if !strings.Contains(log, "closed: the client left") || strings.Contains(log, "dropped; the connection waits") {
		t.Errorf("a client that closed its socket with 1000 was kept for a resume:\n%s", log)
	}
	rh := http.Header{}
	rh.Set("Acp-Connection-Id", id)
	rh.Set("Last-Event-ID", "1")
	if _, resp, err := servetest.DialWebSocket(ctx, e.ws, token, rh); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("a resume of the connection the client left: %v %v, want 404", resp, err)
	}
}
