package actors

import (
	"github.com/mm-agent/mm/jsonrpc"

	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
	"go.uber.org/goleak"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recOutbox records updates and delivers replies at once: the actors are
// tested here without the ACP edge, which has its own end-to-end tests.
type recOutbox struct {
	mu      sync.Mutex
	updates []acp.SessionUpdate
	answers []answer
	rt      *Runtime
	// waiting are the requests a test waits for (reply, wait), by Seq.
	waiting map[uint64]chan any
	// answering, when set, is called with each answer as it is given.
	answering func(res any)
}

// reply names a request whose answer the test waits for (wait).
func (o *recOutbox) reply(method string) Reply {
	r := NewReply(jsonrpc.ID{}, method)
	o.mu.Lock()
	if o.waiting == nil {
		o.waiting = map[uint64]chan any{}
	}
	o.waiting[r.Seq] = make(chan any, 1)
	o.mu.Unlock()
	return r
}

// wait is r's answer, failing the test after the hang bound.
func (o *recOutbox) wait(t testing.TB, r Reply) any {
	t.Helper()
	v, ok := o.await(r)
	if !ok {
		t.Fatalf("no answer to %s", r.Method)
	}
	return v
}

// await is r's answer; false after the hang bound.
func (o *recOutbox) await(r Reply) (any, bool) {
	o.mu.Lock()
	ch := o.waiting[r.Seq]
	o.mu.Unlock()
	select {
	case v := <-ch:
		return v, true
	case <-time.After(testwait.Hang):
		return nil, false
	}
}

// answeredYet says whether r has its answer, without waiting.
func (o *recOutbox) answeredYet(r Reply) bool {
	o.mu.Lock()
	ch := o.waiting[r.Seq]
	o.mu.Unlock()
	return len(ch) > 0
}

func (o *recOutbox) Update(_ string, u acp.SessionUpdate) {
	o.mu.Lock()
	o.updates = append(o.updates, u)
	o.mu.Unlock()
}

func (o *recOutbox) Stream(id string, u acp.SessionUpdate, b *Budget, n int) {
	o.Update(id, u)
	b.Give(n)
}

func (o *recOutbox) Deliver(_ string, pid *actor.PID, msg any) { o.rt.Root().Send(pid, msg) }

func (o *recOutbox) UpdateRaw(string, json.RawMessage) {}

func (o *recOutbox) Answer(_ string, r Reply, res any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.answering != nil {
		o.answering(res)
	}
	if ch, ok := o.waiting[r.Seq]; ok {
		select {
		case ch <- res:
		default:
			panic(fmt.Sprintf("request %d answered twice", r.Seq))
		}
		return
	}
	tr, _ := res.(*TurnResult)
	o.answers = append(o.answers, answer{r.ID.String(), tr})
}

type answer struct {
	id  string
	res *TurnResult
}

func (o *recOutbox) answered() []answer {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]answer(nil), o.answers...)
}

func (o *recOutbox) statuses() []acp.ToolCallStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []acp.ToolCallStatus
	for _, u := range o.updates {
		if u.ToolCallUpdate != nil && u.ToolCallUpdate.Status != nil {
			out = append(out, *u.ToolCallUpdate.Status)
		}
	}
	return out
}

func newTestRuntime(t testing.TB, script string) (*Runtime, *recOutbox) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	model, err := llm.New(llm.Config{Provider: "scripted", Script: path})
	if err != nil {
		t.Fatal(err)
	}
	out := &recOutbox{}
	rt := NewRuntime(Options{Config: configs.Default(), Model: model, Out: out})
	out.rt = rt
	t.Cleanup(rt.Shutdown)
	return rt, out
}

// TestToolPanicFailsTheCallOnly: a tool that panics becomes a failed call;
// the turn goes on and the runtime keeps serving.
func TestToolPanicFailsTheCallOnly(t *testing.T) {
	rt, out := newTestRuntime(t, `
rules:
  - match: "^run$"
    steps:
      - toolCalls: [{name: bash, args: {command: "echo hi"}}]
      - {text: "model read: {{last_tool_output}}"}
`)
	rt.runTool = func(context.Context, tools.Env, *tools.Call) tools.Result { panic("tool exploded") }
	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	defer s.Stop()
	res := ask(s, "run")
	if res.Err != "" || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("turn = %+v", res)
	}
	// The panicking tool never started: no in_progress, straight to failed.
	if st := out.statuses(); len(st) != 1 || st[0] != acp.ToolCallStatusFailed {
		t.Errorf("statuses = %v", st)
	}
	out.mu.Lock()
	var text string
	for _, u := range out.updates {
		if u.AgentMessageChunk != nil {
			text += u.AgentMessageChunk.Content.Text.Text
		}
	}
	out.mu.Unlock()
	if !strings.Contains(text, "panicked: tool exploded") {
		t.Errorf("the model did not read the failure: %q", text)
	}
	// The runtime still serves other sessions.
	s2 := rt.SpawnSession(&SessionState{ID: "s2", Cwd: t.TempDir()}, Attachment{})
	defer s2.Stop()
	if res := ask(s2, "run"); res.StopReason != acp.StopReasonEndTurn || res.Err != "" {
		t.Errorf("second session: %+v", res)
	}
}

// TestSessionStopCancelsItsTurn: stopping a session (the client left) ends
// its running turn as cancelled and stops its children.
func TestSessionStopCancelsItsTurn(t *testing.T) {
	rt, _ := newTestRuntime(t, `
rules:
  - match: "^sleep$"
    steps:
      - toolCalls: [{name: bash, args: {command: "sleep 1000"}}]
`)
	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	res := make(chan *TurnResult, 1)
	go func() { res <- ask(s, "sleep") }()
	for deadline := time.Now().Add(testwait.Hang); ; time.Sleep(time.Millisecond) {
		if st, _ := s.State(); st != nil && len(st.History) > 1 {
			break // the turn is running
		}
		if time.Now().After(deadline) {
			t.Fatal("the turn never started")
		}
	}
	s.Stop()
	select {
	case r := <-res:
		if r.StopReason != acp.StopReasonCancelled {
			t.Errorf("turn = %+v", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the turn outlived its session")
	}
}

// TestSessionSurvivesPanic: a panic in the session's own code (here, on a
// malformed message) does not restart the actor, which would lose the
// session's state: the history is intact and the next turn works.
func TestSessionSurvivesPanic(t *testing.T) {
	rt, _ := newTestRuntime(t, "rules:\n  - match: \"^ping$\"\n    steps: [{text: pong}]\n  - match: \"^slow$\"\n    steps: [{sleep: 30s}]\n")
	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	defer s.Stop()
	if r := ask(s, "ping"); r.StopReason != acp.StopReasonEndTurn {
		t.Fatal(r)
	}
	rt.sys.Root.Send(s.pid, (*StartTurn)(nil))
	if r := ask(s, "ping"); r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("after the panic: %+v", r)
	}
	st, err := s.State()
	if err != nil || len(st.History) != 5 {
		t.Fatalf("state after the panic: %v %+v", err, st)
	}
	// A panic during a turn fails that turn with an error, at once.
	res := make(chan *TurnResult, 1)
	go func() { res <- ask(s, "slow") }()
	for deadline := time.Now().Add(testwait.Hang); ; time.Sleep(time.Millisecond) {
		if st, _ := s.State(); st != nil && st.History[len(st.History)-1].Content == "slow" {
			break // the turn is the session's current one
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow turn never started")
		}
	}
	rt.sys.Root.Send(s.pid, (*modelDelta)(nil))
	select {
	case r := <-res:
		if r.Err == "" || !strings.Contains(r.Err, "mm failed") {
			t.Errorf("turn hit by a panic = %+v", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the turn hit by a panic never ended")
	}
	if r := ask(s, "ping"); r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("after the failed turn: %+v", r)
	}
}

// slowOrQuick is a script whose turns take ten seconds, but "quick"'s.
const slowOrQuick = `
default:
  steps:
    - {text: "slow", latency: 10s}
rules:
  - match: "^quick$"
    steps:
      - {text: "done"}
`

// TestStartAnswersEveryPromptOnce: turns started without a waiting
// goroutine (Session.Start) answer through the outbox exactly once — the
// one that ran with its stop reason, the ones queued behind it, still in
// the mailbox, cancelled; one started after the session stopped is
// refused, cancelled, for its server to answer.
func TestStartAnswersEveryPromptOnce(t *testing.T) {
	rt, out := newTestRuntime(t, slowOrQuick)
	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	s.Start(text("quick"), NewReply(jsonrpc.IntID(1), ""), nil)
	waitFor(t, func() bool { return len(out.answered()) == 1 })
	if a := out.answered()[0]; a.id != "1" || a.res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("first answer = %+v %+v, want end_turn for id 1", a, a.res)
	}
	for i := 2; i <= 6; i++ {
		s.Start(text("slow"), NewReply(jsonrpc.IntID(int64(i)), ""), nil)
	}
	s.Stop()
	// Started after the stop: refused, for its server to answer.
	if _, refused := s.Start(text("quick"), NewReply(jsonrpc.IntID(7), ""), nil); refused == nil {
		t.Fatal("a prompt started after the stop was taken")
	} else if res, ok := refused.(*TurnResult); !ok || res.StopReason != acp.StopReasonCancelled {
		t.Fatalf("a prompt started after the stop: %#v", refused)
	}
	got := out.answered()
	if len(got) != 6 {
		t.Fatalf("%d answers, want 6 (one per prompt the session took): %+v", len(got), got)
	}
	seen := map[string]bool{}
	for _, a := range got[1:] {
		if seen[a.id] {
			t.Fatalf("prompt %s answered twice", a.id)
		}
		seen[a.id] = true
		if a.res.StopReason != acp.StopReasonCancelled || a.res.Err != "" {
			t.Fatalf("prompt %s: %+v, want cancelled", a.id, a.res)
		}
	}
}

// text is a prompt of one text block.
func text(s string) []acp.ContentBlock { return []acp.ContentBlock{acp.TextBlock(s)} }

// ask runs one prompt and waits for its result: the session answers
// through the runtime's outbox, a recOutbox.
func ask(s *Session, prompt string) *TurnResult {
	out := s.rt.out.(*recOutbox)
	r := out.reply(acp.AgentMethodSessionPrompt)
	if _, refused := s.Start(text(prompt), r, nil); refused != nil {
		out.Answer(s.ID, r, refused) // as the prompt's server would
	}
	v, ok := out.await(r)
	if !ok {
		return &TurnResult{Err: "no answer"}
	}
	res, _ := v.(*TurnResult)
	if res == nil {
		res = &TurnResult{StopReason: acp.StopReasonCancelled}
	}
	return res
}

// waitFor polls cond until it holds, failing the test after the hang
// bound.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in %v", testwait.Hang)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCancelRequest: a prompt's $/cancel_request finds it among the
// session's turns, running or queued, and cancels it alone; one that
// reaches the session before its prompt (a cancel overtakes the mailbox,
// as on a cluster node) cancels that prompt when it arrives, and no
// other.
func TestCancelRequest(t *testing.T) {
	rt, out := newTestRuntime(t, slowOrQuick)
	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	answer := func(id string) *TurnResult {
		t.Helper()
		var got *TurnResult
		waitFor(t, func() bool {
			for _, a := range out.answered() {
				if a.id == id {
					got = a.res
					return true
				}
			}
			return false
		})
		return got
	}
	s.Start(text("slow"), NewReply(jsonrpc.IntID(1), ""), nil)  // running
	s.Start(text("slow"), NewReply(jsonrpc.IntID(2), ""), nil)  // queued
	s.Start(text("quick"), NewReply(jsonrpc.IntID(3), ""), nil) // queued behind them
	s.CancelRequest(jsonrpc.IntID(2))
	if r := answer("2"); r.StopReason != acp.StopReasonCancelled {
		t.Errorf("the queued prompt cancelled by its request: %+v", r)
	}
	s.CancelRequest(jsonrpc.IntID(1))
	if r := answer("1"); r.StopReason != acp.StopReasonCancelled {
		t.Errorf("the running prompt cancelled by its request: %+v", r)
	}
	if r := answer("3"); r.StopReason != acp.StopReasonEndTurn {
		t.Errorf("the prompt no cancel named: %+v", r)
	}
	// Its cancel first, then the prompt.
	s.CancelRequest(jsonrpc.StringID("early"))
	s.Start(text("quick"), NewReply(jsonrpc.IntID(4), ""), nil)
	if r := answer("4"); r.StopReason != acp.StopReasonEndTurn {
		t.Errorf("a prompt another request's cancel does not name: %+v", r)
	}
	s.Start(text("slow"), NewReply(jsonrpc.StringID("early"), ""), nil)
	if r := answer(`"early"`); r.StopReason != acp.StopReasonCancelled {
		t.Errorf("a prompt whose cancel came first: %+v", r)
	}
}

// TestBareFolderSystemAtOnce: a session opened in a folder of no
// repository has its environment in its system message before its first
// turn (taken as it opens, not gathered off its actor and made again),
// and one in a repository has it by its first model call.
func TestBareFolderSystemAtOnce(t *testing.T) {
	rt, _ := newTestRuntime(t, "rules:\n  - match: \".*\"\n    steps: [{text: \"ok\"}]\n")
	bare := t.TempDir()
	s := rt.SpawnSession(&SessionState{ID: "bare", Cwd: bare}, Attachment{})
	defer s.Stop()
	st, err := s.State()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.History) == 0 || st.History[0].Role != history.RoleSystem || !strings.Contains(st.History[0].Content, bare) ||
		!strings.Contains(st.History[0].Content, "# Environment") {
		t.Fatalf("the bare folder's session opened with %+v", st.History)
	}
	repo := t.TempDir()
	if err := os.Mkdir(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	g := rt.SpawnSession(&SessionState{ID: "repo", Cwd: repo}, Attachment{})
	defer g.Stop()
	if res := ask(g, "hi"); res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("turn = %+v", res)
	}
	if st, err := g.State(); err != nil || !strings.Contains(st.History[0].Content, "# Environment") {
		t.Fatalf("the repository's session after a turn: %v %+v", err, st)
	}
}
