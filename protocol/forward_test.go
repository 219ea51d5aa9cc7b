package protocol_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/protocol"
)

const forwardScript = `
rules:
  - match: "^ping$"
    steps: [{text: "pong"}]
  - match: "^write$"
    steps:
      - toolCalls: [{name: bash, args: {command: "touch made.txt"}}]
      - {text: "made"}
  - match: "^slow$"
    steps: [{sleep: 1h}] # never answers: only a cancel ends its turn
`

// loopForwarder is a Forwarder whose "other node" is a second hub in this
// process, the client's Caller there writing back through a loopLink:
// what a cluster's grains do, without the network (package grains has
// the real one).
type loopForwarder struct {
	c    *protocol.Caller
	link *loopLink
	// served counts the requests Serve has returned from.
	served atomic.Int32
}

func (f *loopForwarder) Forward(sid string, r actors.Reply, p any, _ json.RawMessage) {
	switch r.Method {
	case acp.AgentMethodSessionCancel:
		f.c.CancelSession(sid, nil)
		return
	}
	f.link.expect(r, sid)
	f.c.Serve(r.Method, r.ID, p, sid, nil)
	f.served.Add(1)
}

func (f *loopForwarder) NewSessionID() string { return actors.NewSessionID(time.Now()) }

func (f *loopForwarder) CancelRequest(requestID jsonrpc.ID) bool {
	sid, ok := f.link.waiting(requestID)
	if !ok {
		return false
	}
	f.c.CancelRequest(sid, requestID)
	return true
}

func (f *loopForwarder) Close(time.Duration) { f.c.Close() }

// loopLink is the other node's way back to the edge's connection.
type loopLink struct {
	sink protocol.Sink
	mu   sync.Mutex
	// asked are the edge's requests by id, as its outbox expects them;
	// sids their sessions.
	asked map[jsonrpc.ID]actors.Reply
	sids  map[jsonrpc.ID]string
}

func (l *loopLink) expect(r actors.Reply, sid string) {
	l.mu.Lock()
	l.asked[r.ID], l.sids[r.ID] = r, sid
	l.mu.Unlock()
}

func (l *loopLink) waiting(id jsonrpc.ID) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.asked[id]
	return l.sids[id], ok
}

func (l *loopLink) Update(sid string, u acp.SessionUpdate) { l.Stream(sid, u, nil, 0) }

func (l *loopLink) UpdateRaw(sid string, raw json.RawMessage) { l.sink.Update(sid, raw, nil, 0) }

func (l *loopLink) Stream(sid string, u acp.SessionUpdate, b *actors.Budget, n int) {
	raw, err := json.Marshal(u)
	if err != nil {
		panic(err)
	}
	l.sink.Update(sid, raw, b, n)
}

func (l *loopLink) Deliver(sid string, pid *actor.PID, msg any) { l.sink.Deliver(sid, pid, msg) }

func (l *loopLink) Answer(sid string, r actors.Reply, result any, rerr *acp.RequestError) {
	l.mu.Lock()
	er, ok := l.asked[r.ID]
	delete(l.asked, r.ID)
	delete(l.sids, r.ID)
	l.mu.Unlock()
	if !ok {
		return
	}
	var raw json.RawMessage
	if rerr == nil {
		raw, _ = json.Marshal(result)
	}
	l.sink.Answer(sid, er, raw, rerr)
}

func (l *loopLink) call(ctx context.Context, sid, method string, params any) (json.RawMessage, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	return l.sink.Ask(sid, method, raw)(ctx)
}

// TestSessionsServedOnAnotherNode: with a Forwarder, a connection serves
// nothing of its sessions itself: a second hub (the other node) does,
// through the client's Caller there, and the client cannot tell: a session is
// made, a turn with a permission request runs, a cancel ends a turn, and a
// request for another owner's session finds nothing.
func TestSessionsServedOnAnotherNode(t *testing.T) {
	srv, _ := scriptServer(t, forwardScript)
	cfg := configs.Default()
	cfg.Model.BaseURL = srv.URL()
	cfg.Model.ContextWindow = 16384
	cfg.Skills.Dirs = []string{".mm/skills"}
	cfg.Yolo = false
	model, err := llm.New(llm.Config{Provider: "openai", BaseURL: srv.URL(), Name: "test", Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	// One actor system for both, as a node of a cluster has one: the
	// session's deliveries and the credits of the "other node" reach
	// the edge's actors, and back.
	sys := actors.NewSystem(nil)
	t.Cleanup(sys.Shutdown)
	newHub := func() *protocol.Hub {
		h, err := app.NewHub(app.Options{Config: cfg, Model: model, ContextWindow: 16384, System: sys})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Shutdown)
		return h
	}
	edge, node := newHub(), newHub()
	var fwd *loopForwarder
	connect := func(owner string) *acptest.Conn {
		c := acptest.OnHub(edge, protocol.ConnOptions{Owner: owner, Forward: func(sink protocol.Sink) protocol.Forwarder {
			l := &loopLink{sink: sink, asked: map[jsonrpc.ID]actors.Reply{}, sids: map[jsonrpc.ID]string{}}
			fwd = &loopForwarder{link: l, c: node.NewCaller(protocol.CallerOptions{Owner: owner, Node: "n1", Link: l,
				Asks: protocol.NewClient(l.call, sink.Forms, sink.Caps)})}
			return fwd
		}})
		t.Cleanup(func() { _ = c.Close(testwait.Hang) })
		return c
	}
	c := connect("alice")
	e := &hubEnv{t: t, hub: edge, cwd: t.TempDir(), ctx: t.Context()}
	if _, err := c.Init(e.ctx); err != nil {
		t.Fatal(err)
	}
	sid := e.newSession(c)
	if err := c.Client.WaitUpdate(e.ctx, sid, func(u acp.SessionUpdate) bool { return u.AvailableCommandsUpdate != nil }); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Ask(e.ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn || acptest.Text(c.Client.Updates(sid)) != "pong" {
		t.Fatalf("ping on the other node: %v %v", res, err)
	}
	c.Client.Reset()
	if res, err := c.Ask(e.ctx, sid, "write"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a turn with a permission request: %v %v", res, err)
	}
	if n := len(c.Client.Permissions()); n != 1 {
		t.Errorf("%d permission requests, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(e.cwd, "made.txt")); err != nil {
		t.Errorf("the allowed command did not run on the other node: %v", err)
	}
	done := make(chan acp.StopReason, 1)
	go func() {
		res, _ := c.Ask(e.ctx, sid, "slow")
		done <- res.StopReason
	}()
	waitFor(t, func() bool { return srv.Requests() >= 4 })
	_ = c.Cancel(e.ctx, acp.CancelNotification{SessionId: sid})
	if r := <-done; r != acp.StopReasonCancelled {
		t.Errorf("cancelled turn: %s", r)
	}
	// Every creator of the remote client taken: its session/new waits for
	// one on a goroutine of its own, not in Serve (on a node, a grain's
	// Receive), and is made once one is free.
	release := protocol.HoldCreators(fwd.c)
	before := fwd.served.Load()
	made := make(chan error, 1)
	go func() {
		_, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{}})
		made <- err
	}()
	waitFor(t, func() bool { return fwd.served.Load() > before })
	select {
	case err := <-made:
		t.Fatalf("a session/new answered with no creator free: %v", err)
	default:
	}
	release()
	if err := <-made; err != nil {
		t.Fatalf("the session/new once a creator is free: %v", err)
	}
	bob := connect("bob")
	if _, err := bob.Init(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Prompt(e.ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock("ping")}}); !unknown(err) {
		t.Errorf("another owner's prompt on the other node: %v, want the unknown-session error", err)
	}
	if edge.Sessions() != 0 || node.Sessions() != 2 {
		t.Errorf("sessions: %d on the edge, %d on the node; want 0 and 2", edge.Sessions(), node.Sessions())
	}
}
