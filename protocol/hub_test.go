package protocol_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/llm/llmtest"
	"github.com/mm-agent/mm/protocol"
)

// The tests of this file put several connections on one hub, as `mm
// serve` does: each with the token (owner) it came with.

// hubEnv is a hub and the clients connected to it.
type hubEnv struct {
	t      *testing.T
	hub    *protocol.Hub
	server *llmtest.Server
	cwd    string
	ctx    context.Context
}

func newHubEnv(t *testing.T, edit func(*configs.Config)) *hubEnv {
	t.Helper()
	return newHubEnvScript(t, script, edit)
}

// newHubEnvScript is newHubEnv with the model's script.
func newHubEnvScript(t *testing.T, script string, edit func(*configs.Config)) *hubEnv {
	t.Helper()
	return newHubEnvWith(t, script, edit, nil)
}

// newHubEnvWith is newHubEnvScript with the hub's options changed by opts.
func newHubEnvWith(t *testing.T, script string, edit func(*configs.Config), opts func(*app.Options)) *hubEnv {
	t.Helper()
	srv, _ := scriptServer(t, script)
	cfg := configs.Default()
	cfg.Model.BaseURL = srv.URL()
	cfg.Model.ContextWindow = 16384
	cfg.Skills.Dirs = []string{".mm/skills"}
	if edit != nil {
		edit(cfg)
	}
	model, err := llm.New(llm.Config{Provider: "openai", BaseURL: srv.URL(), Name: "test", Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	o := app.Options{Config: cfg, Model: model, ContextWindow: 16384, StateDir: t.TempDir()}
	if opts != nil {
		opts(&o)
	}
	h, err := app.NewHub(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	t.Cleanup(func() { cancel(); h.Shutdown() })
	return &hubEnv{t: t, hub: h, server: srv, cwd: t.TempDir(), ctx: ctx}
}

// client connects a client with owner's token, initialized.
func (e *hubEnv) client(owner string, roots ...string) *acptest.Conn {
	e.t.Helper()
	c := acptest.OnHub(e.hub, protocol.ConnOptions{Owner: owner, Roots: roots})
	e.t.Cleanup(func() { _ = c.Close(testwait.Hang) })
	init, err := c.Init(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if !init.AgentCapabilities.LoadSession {
		e.t.Error("a shared hub's connection does not advertise loadSession")
	}
	return c
}

func (e *hubEnv) newSession(c *acptest.Conn) acp.SessionId {
	e.t.Helper()
	res, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.SessionId
}

// unknown says whether err is the invalid-params error of a session that
// does not exist for the caller.
func unknown(err error) bool {
	var re *acp.RequestError
	return errors.As(err, &re) && re.Code == -32002 && strings.Contains(re.Error(), "unknown session")
}

// TestTokensSeeOnlyTheirSessions: a session belongs to the token that made
// it; another token cannot prompt, load, resume, fork, list or delete it:
// it does not exist for them.
func TestTokensSeeOnlyTheirSessions(t *testing.T) {
	e := newHubEnv(t, func(c *configs.Config) { c.Sessions.Enabled = true })
	alice, bob := e.client("alice"), e.client("bob")
	sid := e.newSession(alice)
	if res, err := alice.Ask(e.ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("alice's ping: %v %v", res, err)
	}
	if _, err := bob.Ask(e.ctx, sid, "ping"); !unknown(err) {
		t.Errorf("bob's prompt on alice's session: %v", err)
	}
	if _, err := bob.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); !unknown(err) {
		t.Errorf("bob's load of alice's session: %v", err)
	}
	if _, err := bob.ResumeSession(e.ctx, acp.ResumeSessionRequest{SessionId: sid, Cwd: e.cwd}); !unknown(err) {
		t.Errorf("bob's resume of alice's session: %v", err)
	}
	if _, err := bob.UnstableForkSession(e.ctx, acp.UnstableForkSessionRequest{SessionId: sid, Cwd: e.cwd}); !unknown(err) {
		t.Errorf("bob's fork of alice's session: %v", err)
	}
	if list, err := bob.ListSessions(e.ctx, acp.ListSessionsRequest{Cwd: acp.Ptr(e.cwd)}); err != nil || len(list.Sessions) != 0 {
		t.Errorf("bob lists %+v, %v", list.Sessions, err)
	}
	if _, err := bob.UnstableDeleteSession(e.ctx, acp.UnstableDeleteSessionRequest{SessionId: sid}); err != nil {
		t.Errorf("bob's delete of a session he cannot see: %v, want the success of a session that is not", err)
	}
	// Alice's session is untouched, and listed for her.
	if res, err := alice.Ask(e.ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("alice's ping after bob's tries: %v %v", res, err)
	}
	if list, err := alice.ListSessions(e.ctx, acp.ListSessionsRequest{Cwd: acp.Ptr(e.cwd)}); err != nil || len(list.Sessions) != 1 || list.Sessions[0].SessionId != sid {
		t.Errorf("alice lists %+v, %v", list.Sessions, err)
	}
	// Her file, once the hub is gone, is still hers: a new hub's bob
	// cannot load it from the disk either.
	if _, err := os.Stat(filepath.Join(e.cwd, ".mm", "sessions", string(sid)+".json")); err != nil {
		t.Fatal(err)
	}
}

// TestReconnectTakesTheSessionOver: a client of the same token that loads
// a session another connection holds takes it over: the old connection's
// turn ends cancelled, its later requests find no session, and the new
// connection gets the history and the next turns.
func TestReconnectTakesTheSessionOver(t *testing.T) {
	e := newHubEnv(t, nil) // not saved: the live session itself moves
	first, second := e.client("alice"), e.client("alice")
	sid := e.newSession(first)
	if _, err := first.Ask(e.ctx, sid, "ping"); err != nil {
		t.Fatal(err)
	}
	slow := make(chan acp.StopReason, 1)
	go func() {
		res, _ := first.Ask(e.ctx, sid, "slow")
		slow <- res.StopReason
	}()
	waitFor(t, func() bool { return e.server.Requests() == 2 }) // the slow turn runs
	if _, err := second.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("the reconnected client's load: %v", err)
	}
	select {
	case r := <-slow:
		if r != acp.StopReasonCancelled {
			t.Errorf("the old connection's turn ended %s, want cancelled", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the old connection's turn did not end")
	}
	replayed := acptest.Text(second.Client.Updates(sid))
	if !strings.HasPrefix(replayed, "pong") {
		t.Errorf("the load replayed %q, want the earlier answer", replayed)
	}
	second.Client.Reset()
	if r, err := second.Ask(e.ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn || acptest.Text(second.Client.Updates(sid)) != "pong" {
		t.Fatalf("a turn on the new connection: %v %v", r, err)
	}
	if _, err := first.Ask(e.ctx, sid, "ping"); !unknown(err) {
		t.Errorf("the old connection still drives the session: %v", err)
	}
}

// TestDisconnectLeavesTheSessionLoadable: a client that goes away leaves
// its sessions to be taken up by a new connection of the same token.
func TestDisconnectLeavesTheSessionLoadable(t *testing.T) {
	e := newHubEnv(t, nil)
	first := e.client("alice")
	sid := e.newSession(first)
	if _, err := first.Ask(e.ctx, sid, "ping"); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(testwait.Hang); err != nil {
		t.Fatal(err)
	}
	again := e.client("alice")
	if _, err := again.ResumeSession(e.ctx, acp.ResumeSessionRequest{SessionId: sid, Cwd: e.cwd}); err != nil {
		t.Fatalf("resume after the first client left: %v", err)
	}
	if r, err := again.Ask(e.ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn || acptest.Text(again.Client.Updates(sid)) != "pong" {
		t.Fatalf("a turn after the reconnect: %v %v %q", r, err, acptest.Text(again.Client.Updates(sid)))
	}
	if other := e.client("bob"); true {
		if _, err := other.ResumeSession(e.ctx, acp.ResumeSessionRequest{SessionId: sid, Cwd: e.cwd}); !unknown(err) {
			t.Errorf("another token resumed it: %v", err)
		}
	}
}

// TestRootsBoundTheCwd: a session's cwd outside every root of the server
// is refused with invalid params naming the roots.
func TestRootsBoundTheCwd(t *testing.T) {
	e := newHubEnv(t, nil)
	root := t.TempDir()
	inside := filepath.Join(root, "project")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	c := e.client("alice", root)
	if _, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: inside, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("a cwd inside the root: %v", err)
	}
	_, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{}})
	var re *acp.RequestError
	if !errors.As(err, &re) || re.Code != -32602 || !strings.Contains(re.Error(), root) {
		t.Fatalf("a cwd outside the roots: %v, want invalid params naming %s", err, root)
	}
	if err := os.Mkdir(root+"-sibling", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: root + "-sibling", McpServers: []acp.McpServer{}}); err == nil {
		t.Error("a sibling folder whose name starts with the root's was taken")
	}
	_, err = c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: inside, AdditionalDirectories: []string{e.cwd}, McpServers: []acp.McpServer{}})
	if !errors.As(err, &re) || re.Code != -32602 {
		t.Errorf("an additional directory outside the roots: %v", err)
	}
}

// TestRootsAreTheFoldersOnDisk: a link inside a root that points out of it
// is outside the roots, as cwd and as an additional directory (issue 28:
// bash then ran outside); a link that stays inside is fine, and so is a
// root that is itself reached through a link.
func TestRootsAreTheFoldersOnDisk(t *testing.T) {
	e := newHubEnv(t, nil)
	base := t.TempDir()
	root := filepath.Join(base, "root")
	if err := os.MkdirAll(filepath.Join(root, "project"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "out")
	if err := os.Symlink(e.cwd, out); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(root, "in")
	if err := os.Symlink(filepath.Join(root, "project"), in); err != nil {
		t.Fatal(err)
	}
	viaLink := filepath.Join(base, "root-link")
	if err := os.Symlink(root, viaLink); err != nil {
		t.Fatal(err)
	}
	c := e.client("alice", root)
	var re *acp.RequestError
	if _, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: out, McpServers: []acp.McpServer{}}); !errors.As(err, &re) || re.Code != -32602 {
		t.Errorf("a link out of the root as cwd: %v", err)
	}
	if _, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: in, AdditionalDirectories: []string{out}, McpServers: []acp.McpServer{}}); !errors.As(err, &re) || re.Code != -32602 {
		t.Errorf("a link out of the root as an additional directory: %v", err)
	}
	if _, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: in, McpServers: []acp.McpServer{}}); err != nil {
		t.Errorf("a link that stays in the root: %v", err)
	}
	named := e.client("alice", viaLink)
	if _, err := named.NewSession(e.ctx, acp.NewSessionRequest{Cwd: filepath.Join(viaLink, "project"), McpServers: []acp.McpServer{}}); err != nil {
		t.Errorf("a folder of a root named through a link: %v", err)
	}
	if _, err := named.NewSession(e.ctx, acp.NewSessionRequest{Cwd: in, McpServers: []acp.McpServer{}}); err != nil {
		t.Errorf("a link in a root named through a link: %v", err)
	}
}
