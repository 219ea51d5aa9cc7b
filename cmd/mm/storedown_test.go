package main

import (
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/cutproxy"
	"github.com/mm-agent/mm/internal/testwait"
)

// TestServeStoreDown: mm serve keeps its sessions in Postgres, reached
// through a proxy the test cuts, as a database that goes away does. A turn
// that ran while the store was up but could not be saved is answered with
// an error that says so, never end_turn; a prompt while it is down runs
// nothing and says why; session/new fails; /readyz answers 503. Once the
// store is back the node is ready again and the next turn saves the
// session whole. After a kill -9, a new server loads it: every turn
// answered end_turn is there, and the one never run is not.
func TestServeStoreDown(t *testing.T) {
	testwait.Short(t, "mm serve on a PostgreSQL the test takes away")
	u, err := neturl.Parse(pg.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	direct := u.String()
	proxy := cutproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	model := newHeldModel(t)
	dir := t.TempDir()
	start := func(url string) *served {
		extra := fmt.Sprintf("sessions:\n  enabled: true\nstore:\n  url: %q\n", url)
		return startServeModel(t, mmBin, dir, "config.yaml", model.section(), serveScript, extra, "MM_SERVE_TOKEN="+serveToken)
	}
	s := start(u.String())
	ctx := testwait.Context(t)
	w := s.wire(t)
	project := s.project(t)
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	sid := res.SessionId
	if r, err := w.ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping: %v %v", r, err)
	}

	// A turn under way when the store goes.
	held := make(chan error, 1)
	go func() {
		r, err := w.ask(ctx, sid, "held")
		if err == nil {
			err = fmt.Errorf("answered %s", r.StopReason)
		}
		held <- err
	}()
	waitUntil(t, "the held turn streaming", func() bool {
		return strings.Contains(acptest.Text(w.rec.Updates(sid)), "held")
	})
	proxy.Cut()
	waitUntil(t, "/readyz saying 503 with the store down", func() bool { return s.readyz(t) == http.StatusServiceUnavailable })
	model.let()
	select {
	case err := <-held:
		if !strings.Contains(err.Error(), "this turn could not be saved, so it is not kept yet") {
			t.Errorf("the turn whose save failed: %v, want the error that says it is not kept", err)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the held turn was never answered")
	}
	if r, err := w.ask(ctx, sid, "never run"); err == nil || !strings.Contains(err.Error(), "its store cannot be reached") {
		t.Errorf("a prompt with the store down: %v %v, want the error that says nothing would be kept", r, err)
	}
	// Refused before anything starts: whose the folder is cannot be told.
	if _, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}}); err == nil || !strings.Contains(err.Error(), "cannot tell whose folder this is now") || !strings.Contains(err.Error(), "postgres") {
		t.Errorf("session/new with the store down: %v, want an error that says the folders' owners cannot be read", err)
	}
	if !strings.Contains(s.stderr.String(), "serve: the session store cannot be reached") {
		t.Errorf("no log line for the store going away:\n%s", s.stderr.String())
	}

	proxy.Restore()
	waitUntil(t, "/readyz saying 200 with the store back", func() bool { return s.readyz(t) == http.StatusOK })
	if r, err := w.ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping with the store back: %v %v", r, err)
	}

	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = s.waitExit(t, "kill -9")
	s2 := start(direct)
	w2 := s2.wire(t)
	if _, err := w2.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: project, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("load after kill -9: %v", err)
	}
	replay := acptest.Text(w2.rec.Updates(sid))
	if strings.Count(replay, "pong") != 2 || !strings.Contains(replay, heldRest) || strings.Contains(replay, "never run") {
		t.Errorf("the replay after kill -9 is not every kept turn: %q", replay)
	}
}
