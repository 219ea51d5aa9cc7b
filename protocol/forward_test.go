package protocol_test

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/app"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/protocol"
	"github.com/mm-agent/mm/protocol/acptest"
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
// process: what a cluster's grains do, without the network (package grains
// has the real one).
type loopForwarder struct {
	v        *protocol.Virtual
	answered func(int)
	mu       sync.Mutex
	prompts  map[string]string // prompt request id → session
}

func (f *loopForwarder) Forward(sid, method string, id json.RawMessage, p any) {
	if method == acp.AgentMethodSessionPrompt && id != nil {
		f.mu.Lock()
		f.prompts[string(id)] = sid
		f.mu.Unlock()
	}
	if method == acp.AgentMethodSessionCancel {
		f.v.Cancel(sid)
		return
	}
	f.v.Serve(method, id, p, sid)
}

func (f *loopForwarder) CancelRequest(requestID json.RawMessage) bool {
	f.mu.Lock()
	_, ok := f.prompts[string(requestID)]
	f.mu.Unlock()
	if ok {
		f.v.CancelRequest(requestID)
	}
	return ok
}

func (f *loopForwarder) Answer(id, result, rerr json.RawMessage) bool {
	return f.v.Answered(id, result, rerr)
}

func (f *loopForwarder) Close(time.Duration) { f.v.Close() }

// lineCounter writes a virtual connection's lines to the edge's writer,
// and tells the edge how many were responses.
type lineCounter struct {
	out      io.Writer
	answered func(int)
}

func (l *lineCounter) Write(b []byte) (int, error) {
	n := 0
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !gjson.Get(line, "method").Exists() && gjson.Get(line, "id").Exists() {
			n++
		}
	}
	k, err := l.out.Write(b)
	l.answered(n)
	return k, err
}

// TestSessionsServedOnAnotherNode: with a Forwarder, a connection serves
// nothing of its sessions itself: a second hub (the other node) does,
// through a virtual connection, and the client cannot tell: a session is
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
	newHub := func() *protocol.Hub {
		h, err := app.NewHub(app.Options{Config: cfg, Model: model, ContextWindow: 16384})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Shutdown)
		return h
	}
	edge, node := newHub(), newHub()
	connect := func(owner string) *acptest.Conn {
		c := acptest.OnHub(edge, protocol.ConnOptions{Owner: owner, Forward: func(out io.Writer, answered func(int)) protocol.Forwarder {
			v := node.Virtual(protocol.VirtualOptions{Out: &lineCounter{out: out, answered: answered}, Owner: owner, CallPrefix: "mm-n1-", Node: "n1"})
			return &loopForwarder{v: v, answered: answered, prompts: map[string]string{}}
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
	bob := connect("bob")
	if _, err := bob.Init(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Prompt(e.ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock("ping")}}); !unknown(err) {
		t.Errorf("another owner's prompt on the other node: %v, want the unknown-session error", err)
	}
	if edge.Sessions() != 0 || node.Sessions() != 1 {
		t.Errorf("sessions: %d on the edge, %d on the node; want 0 and 1", edge.Sessions(), node.Sessions())
	}
}
