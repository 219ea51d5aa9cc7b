package protocol_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"go.uber.org/goleak"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
)

// toolScript makes the model call tools; the second step reports what the
// tool said, so tests see what the model read.
const toolScript = `
rules:
  - match: "^echo$"
    steps:
      - {text: "Running it.", toolCalls: [{name: bash, args: {command: "echo hi"}}]}
      - {text: "model read: {{last_tool_output}}"}
  - match: "^two$"
    steps:
      - toolCalls: [{name: bash, args: {command: "echo one"}}, {name: bash, args: {command: "echo two"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^write$"
    steps:
      - toolCalls: [{name: write_file, args: {path: "notes.txt", content: "alpha\nbeta\n"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^edit$"
    steps:
      - toolCalls: [{name: edit_file, args: {path: "notes.txt", old_text: "beta", new_text: "gamma"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^read$"
    steps:
      - toolCalls: [{name: read_file, args: {path: "notes.txt"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^ambiguous$"
    steps:
      - toolCalls: [{name: edit_file, args: {path: "dup.txt", old_text: "x", new_text: "y"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^secret$"
    steps:
      - toolCalls: [{name: read_file, args: {path: ".env"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^outside$"
    steps:
      - toolCalls: [{name: write_file, args: {path: "../outside.txt", content: "x"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^sleep$"
    steps:
      - toolCalls: [{name: bash, args: {command: "echo $$ > pids; (sleep 300 & echo $! >> pids; wait) & sleep 300 & echo $! >> pids; wait"}}]
      - {text: "not reached"}
  - match: "^leave$"
    steps:
      - toolCalls: [{name: bash, args: {command: "sleep 300 >/dev/null 2>&1 & echo $! > bg.pid; setsid sleep 300 >/dev/null 2>&1 & echo $! > sid.pid; echo left"}}]
      - {text: "left them"}
  - match: "^loop$"
    steps:
      - toolCalls: [{name: bash, args: {command: "true"}}]
      - toolCalls: [{name: bash, args: {command: "true"}}]
      - toolCalls: [{name: bash, args: {command: "true"}}]
      - {text: "finally"}
usage: true
`

func newToolEnv(t *testing.T, edit func(*configs.Config)) *env {
	t.Helper()
	return newEnvScript(t, toolScript, edit)
}

// toolUpdates returns the tool_call and tool_call_update notifications of a session.
func toolUpdates(ups []acp.SessionUpdate) (calls []*acp.SessionUpdateToolCall, updates []*acp.SessionToolCallUpdate) {
	for _, u := range ups {
		if u.ToolCall != nil {
			calls = append(calls, u.ToolCall)
		}
		if u.ToolCallUpdate != nil {
			updates = append(updates, u.ToolCallUpdate)
		}
	}
	return
}

func callNumber(t *testing.T, id acp.ToolCallId) int {
	n, err := strconv.Atoi(strings.TrimPrefix(string(id), "call_"))
	if err != nil || !strings.HasPrefix(string(id), "call_") {
		t.Fatalf("call id %q is not call_N", id)
	}
	return n
}

func TestBashTool(t *testing.T) {
	e := newToolEnv(t, nil)
	sid := e.newSession()
	res := e.ask(sid, "echo")
	if res.StopReason != acp.StopReasonEndTurn {
		t.Fatal(res.StopReason)
	}
	ups := e.conn.Client.Updates(sid)
	calls, updates := toolUpdates(ups)
	if len(calls) != 1 || len(updates) != 2 {
		t.Fatalf("%d tool_call, %d updates", len(calls), len(updates))
	}
	c := calls[0]
	callNumber(t, c.ToolCallId)
	if c.Title != "bash: echo hi" || c.Kind != acp.ToolKindExecute || c.Status != acp.ToolCallStatusPending || c.RawInput.(map[string]any)["command"] != "echo hi" {
		t.Errorf("tool_call = %+v", c)
	}
	if updates[0].Status == nil || *updates[0].Status != acp.ToolCallStatusInProgress {
		t.Errorf("first update = %+v", updates[0])
	}
	done := updates[1]
	if *done.Status != acp.ToolCallStatusCompleted || done.ToolCallId != c.ToolCallId {
		t.Errorf("final update = %+v", done)
	}
	out := done.RawOutput.(map[string]any)["output"].(string)
	if !strings.Contains(out, "hi") || done.Content[0].Content == nil || done.Content[0].Content.Content.Text.Text != out {
		t.Errorf("output %q, content %+v", out, done.Content)
	}
	// Text before the call, the call, then the model's answer about the output.
	if text := acptest.Text(ups); !strings.HasPrefix(text, "Running it.model read: hi") {
		t.Errorf("text = %q", text)
	}
	if !strings.Contains(e.conn.Stderr.String(), "[acp] turn done: 1 command(s) · 0 file op(s) · 0 skill(s)") {
		t.Errorf("log:\n%s", e.conn.Stderr.String())
	}
	// The model got the tool result as a tool message.
	msgs := e.requestMessages()
	last := msgs[len(msgs)-1]
	if last["role"] != "tool" || !strings.Contains(fmt.Sprint(last["content"]), "hi") {
		t.Errorf("last message sent = %v", last)
	}
	// Call ids go on across turns: call_N then call_N+1, call_N+2.
	e.conn.Client.Reset()
	e.ask(sid, "two")
	calls2, _ := toolUpdates(e.conn.Client.Updates(sid))
	if len(calls2) != 2 || callNumber(t, calls2[0].ToolCallId) != callNumber(t, c.ToolCallId)+1 || callNumber(t, calls2[1].ToolCallId) != callNumber(t, c.ToolCallId)+2 {
		t.Errorf("ids %v after %s", calls2, c.ToolCallId)
	}
}

func TestFileTools(t *testing.T) {
	e := newToolEnv(t, nil)
	sid := e.newSession()
	path := filepath.Join(e.cwd, "notes.txt")

	e.ask(sid, "write")
	calls, updates := toolUpdates(e.conn.Client.Updates(sid))
	if calls[0].Title != "write_file: notes.txt" || calls[0].Kind != acp.ToolKindEdit || len(calls[0].Locations) != 1 || calls[0].Locations[0].Path != path {
		t.Errorf("write tool_call = %+v", calls[0])
	}
	d := updates[len(updates)-1].Content[0].Diff
	if d == nil || d.Path != path || d.OldText != nil || d.NewText != "alpha\nbeta\n" {
		t.Errorf("write diff = %+v", d)
	}
	if b, _ := os.ReadFile(path); string(b) != "alpha\nbeta\n" {
		t.Errorf("file = %q", b)
	}

	e.conn.Client.Reset()
	e.ask(sid, "edit")
	_, updates = toolUpdates(e.conn.Client.Updates(sid))
	d = updates[len(updates)-1].Content[0].Diff
	if d == nil || d.OldText == nil || *d.OldText != "alpha\nbeta\n" || d.NewText != "alpha\ngamma\n" {
		t.Errorf("edit diff = %+v", d)
	}

	e.conn.Client.Reset()
	e.ask(sid, "read")
	calls, updates = toolUpdates(e.conn.Client.Updates(sid))
	if calls[0].Kind != acp.ToolKindRead || calls[0].Title != "read_file: notes.txt" {
		t.Errorf("read tool_call = %+v", calls[0])
	}
	if out := updates[len(updates)-1].RawOutput.(map[string]any)["output"].(string); !strings.Contains(out, "gamma") {
		t.Errorf("read output %q", out)
	}
	if !strings.Contains(e.conn.Stderr.String(), "0 command(s) · 1 file op(s)") {
		t.Error("file ops not counted")
	}
}

func TestBadToolArgumentsAreResultsForTheModel(t *testing.T) {
	e := newToolEnv(t, nil)
	sid := e.newSession()
	if err := os.WriteFile(filepath.Join(e.cwd, "dup.txt"), []byte("x x"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := e.ask(sid, "ambiguous")
	if res.StopReason != acp.StopReasonEndTurn {
		t.Fatal(res.StopReason)
	}
	_, updates := toolUpdates(e.conn.Client.Updates(sid))
	last := updates[len(updates)-1]
	if *last.Status != acp.ToolCallStatusFailed {
		t.Errorf("status = %s", *last.Status)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, "model read:") || !strings.Contains(text, "2") {
		t.Errorf("the model did not read the error: %q", text)
	}
	if b, _ := os.ReadFile(filepath.Join(e.cwd, "dup.txt")); string(b) != "x x" {
		t.Error("ambiguous edit changed the file")
	}
}

// TestMaxModelCalls: a turn that would go on past its budget ends with a
// last call made without tools, whose answer the user reads, then with
// max_turn_requests; a turn within the budget ends as usual.
func TestMaxModelCalls(t *testing.T) {
	e := newToolEnv(t, func(c *configs.Config) { c.Turns.MaxModelCalls = 3 })
	sid := e.newSession()
	if res := e.ask(sid, "loop"); res.StopReason != acp.StopReasonMaxTurnRequests {
		t.Errorf("stopReason = %s", res.StopReason)
	}
	// The scripted model echoes the last call's note: the user sees the
	// answer to it.
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, "You said: [mm: this turn has used its 3 model calls") {
		t.Errorf("the last call's answer is not shown: %q", text)
	}
	// The history stays valid: the next turn works.
	if res := e.ask(sid, "echo"); res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("next turn: %s", res.StopReason)
	}
}

func answer(option string) func(acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	return func(acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
			Selected: &acp.RequestPermissionOutcomeSelected{OptionId: acp.PermissionOptionId(option)},
		}}, nil
	}
}

func TestPermissions(t *testing.T) {
	askMode := func(c *configs.Config) { c.Yolo = false }
	t.Run("request shape", func(t *testing.T) {
		e := newToolEnv(t, askMode)
		sid := e.newSession()
		e.ask(sid, "write")
		perms := e.conn.Client.Permissions()
		if len(perms) != 1 {
			t.Fatalf("%d requests", len(perms))
		}
		p := perms[0]
		want := []struct{ id, kind string }{{"allow", "allow_once"}, {"allow_always", "allow_always"}, {"reject", "reject_once"}, {"never", "reject_always"}}
		for i, o := range p.Options {
			if string(o.OptionId) != want[i].id || string(o.Kind) != want[i].kind {
				t.Errorf("option %d = %+v", i, o)
			}
		}
		if p.SessionId != sid || *p.ToolCall.Title != "write_file: notes.txt" || len(p.ToolCall.Content) != 1 || p.ToolCall.Content[0].Diff == nil || p.ToolCall.Content[0].Diff.NewText != "alpha\nbeta\n" {
			t.Errorf("request = %+v", p.ToolCall)
		}
		// The pending tool_call was sent before the request.
		calls, _ := toolUpdates(e.conn.Client.Updates(sid))
		if calls[0].ToolCallId != p.ToolCall.ToolCallId {
			t.Errorf("request for %s, tool_call %s", p.ToolCall.ToolCallId, calls[0].ToolCallId)
		}
		// Reading never asks.
		e.ask(sid, "read")
		if n := len(e.conn.Client.Permissions()); n != 1 {
			t.Errorf("read_file asked (%d requests)", n)
		}
	})
	for _, tc := range []struct {
		name   string
		answer func(acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error)
		ran    bool
	}{
		{"allow", answer("allow"), true},
		{"reject", answer("reject"), false},
		{"transport error", func(acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
			return acp.RequestPermissionResponse{}, errors.New("client gone")
		}, false},
		{"cancelled outcome", func(acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
			return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newToolEnv(t, askMode)
			e.conn.Client.Permission = tc.answer
			sid := e.newSession()
			e.ask(sid, "echo")
			text := acptest.Text(e.conn.Client.Updates(sid))
			_, updates := toolUpdates(e.conn.Client.Updates(sid))
			last := updates[len(updates)-1]
			if tc.ran {
				if !strings.Contains(text, "model read: hi") || *last.Status != acp.ToolCallStatusCompleted {
					t.Errorf("allowed command did not run: %q", text)
				}
				return
			}
			if !strings.Contains(text, "model read: [command rejected by the user]") || *last.Status != acp.ToolCallStatusFailed {
				t.Errorf("refused command: text %q, status %s", text, *last.Status)
			}
			for _, u := range updates {
				if *u.Status == acp.ToolCallStatusInProgress {
					t.Error("a refused call went in_progress")
				}
			}
		})
	}
	for _, remembered := range []string{"allow_always", "never"} {
		t.Run(remembered+" is remembered across turns and /new", func(t *testing.T) {
			e := newToolEnv(t, askMode)
			e.conn.Client.Permission = answer(remembered)
			sid := e.newSession()
			e.ask(sid, "echo")
			e.ask(sid, "/new")
			e.conn.Client.Reset()
			e.conn.Client.Permission = answer("reject")
			e.ask(sid, "echo")
			if n := len(e.conn.Client.Permissions()); n != 0 {
				t.Errorf("asked again (%d) after %s", n, remembered)
			}
			text := acptest.Text(e.conn.Client.Updates(sid))
			if remembered == "allow_always" && !strings.Contains(text, "model read: hi") {
				t.Errorf("allow_always: %q", text)
			}
			if remembered == "never" && !strings.Contains(text, "[command rejected by the user]") {
				t.Errorf("never: %q", text)
			}
			// Another tool still asks.
			e.ask(sid, "write")
			if n := len(e.conn.Client.Permissions()); n != 1 {
				t.Errorf("write_file asked %d times", n)
			}
		})
	}
}

func TestSensitivePathsAskInYolo(t *testing.T) {
	e := newToolEnv(t, nil) // yolo: true
	e.conn.Client.Permission = answer("allow_always")
	sid := e.newSession()
	if err := os.WriteFile(filepath.Join(e.cwd, ".env"), []byte("TOKEN=1"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.ask(sid, "secret")
	e.ask(sid, "secret")
	perms := e.conn.Client.Permissions()
	if len(perms) != 2 {
		t.Fatalf("sensitive read asked %d times, want every time (2)", len(perms))
	}
	e.ask(sid, "outside")
	if n := len(e.conn.Client.Permissions()); n != 3 {
		t.Errorf("write outside the cwd asked %d times in all, want 3", n)
	}
	// Plain commands do not ask in yolo mode.
	e.ask(sid, "echo")
	if n := len(e.conn.Client.Permissions()); n != 3 {
		t.Errorf("bash asked in yolo mode")
	}
}

// TestCancelKillsBash cancels a turn while bash sleeps with a child and a
// grandchild, and checks that none of them survives.
func TestCancelKillsBash(t *testing.T) {
	e := newToolEnv(t, nil)
	sid := e.newSession()
	done := make(chan acp.StopReason, 1)
	go func() {
		res, err := e.conn.Ask(e.ctx, sid, "sleep")
		if err != nil {
			t.Errorf("prompt: %v", err)
		}
		done <- res.StopReason
	}()
	pidFile := filepath.Join(e.cwd, "pids")
	var pids []int
	waitFor(t, func() bool {
		b, _ := os.ReadFile(pidFile)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
		return len(pids) == 3
	})
	start := time.Now()
	if err := e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r != acp.StopReasonCancelled {
		t.Fatalf("stopReason = %s", r)
	}
	t.Logf("cancel answered in %v", time.Since(start))
	for _, pid := range pids {
		if acptest.Alive(pid) {
			t.Errorf("process %d outlived the cancel", pid)
		}
	}
	_, updates := toolUpdates(e.conn.Client.Updates(sid))
	if last := updates[len(updates)-1]; *last.Status != acp.ToolCallStatusFailed {
		t.Errorf("cancelled call ended %s", *last.Status)
	}
	// The session goes on, and its history is one the server accepts.
	if res := e.ask(sid, "echo"); res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("after cancel: %s", res.StopReason)
	}
}

func TestTwoSessionsRunToolsAtOnce(t *testing.T) {
	e := newToolEnv(t, func(c *configs.Config) { c.Turns.Concurrency = 2 })
	a, b := e.newSession(), e.newSession()
	errs := make(chan error, 2)
	for _, sid := range []acp.SessionId{a, b} {
		go func(sid acp.SessionId) {
			res, err := e.conn.Ask(e.ctx, sid, "sleep")
			if err == nil && res.StopReason != acp.StopReasonCancelled {
				err = fmt.Errorf("%s: %s", sid, res.StopReason)
			}
			errs <- err
		}(sid)
	}
	// Both sessions have a bash running at the same time.
	running := func(sid acp.SessionId) bool {
		_, ups := toolUpdates(e.conn.Client.Updates(sid))
		return len(ups) > 0 && *ups[0].Status == acp.ToolCallStatusInProgress
	}
	waitFor(t, func() bool { return running(a) && running(b) })
	// Each session's updates name only its own calls.
	ca, _ := toolUpdates(e.conn.Client.Updates(a))
	cb, _ := toolUpdates(e.conn.Client.Updates(b))
	if ca[0].ToolCallId == cb[0].ToolCallId {
		t.Error("two sessions share a call id")
	}
	for _, sid := range []acp.SessionId{a, b} {
		_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid})
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestTurnsLeaveNothingRunning: once turns have ended — answered, with a
// tool, cancelled mid-command — no goroutine they started is left, while the
// session and the connection stay open.
func TestTurnsLeaveNothingRunning(t *testing.T) {
	e := newToolEnv(t, nil)
	sid := e.newSession()
	e.ask(sid, "echo") // warm up: keep-alive connections to the model server stay
	snapshot := goleak.IgnoreCurrent()
	e.ask(sid, "echo")
	e.ask(sid, "two")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.conn.Ask(e.ctx, sid, "sleep")
	}()
	waitFor(t, func() bool {
		_, ups := toolUpdates(e.conn.Client.Updates(sid))
		return len(ups) > 0 && *ups[len(ups)-1].Status == acp.ToolCallStatusInProgress
	})
	_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid})
	<-done
	// Keep-alive connections to the model server come and go with the
	// HTTP pool; the actor dispatcher's workers and the idle prompt
	// handlers are kept for the next turns (bounded, and ended with the
	// connection: TestMain checks that). None of them is the turn's.
	if err := goleak.Find(snapshot,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("github.com/mm-agent/mm/actors.(*dispatcher).work"),
		goleak.IgnoreAnyFunction("github.com/mm-agent/mm/internal/gopool.(*Cache).loop")); err != nil {
		t.Error(err)
	}
}

// TestCancelAbandonsPermissionRequest: a cancel while the user has not yet
// answered a permission request ends the turn at once; the command never runs.
func TestCancelAbandonsPermissionRequest(t *testing.T) {
	e := newToolEnv(t, func(c *configs.Config) { c.Yolo = false })
	release := make(chan struct{})
	defer close(release)
	e.conn.Client.Permission = func(acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
		<-release // the user looks away
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
			Selected: &acp.RequestPermissionOutcomeSelected{OptionId: "allow"},
		}}, nil
	}
	sid := e.newSession()
	done := make(chan acp.StopReason, 1)
	go func() {
		res, _ := e.conn.Ask(e.ctx, sid, "write")
		done <- res.StopReason
	}()
	waitFor(t, func() bool { return len(e.conn.Client.Permissions()) == 1 })
	_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid})
	select {
	case r := <-done:
		if r != acp.StopReasonCancelled {
			t.Fatalf("stopReason = %s", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the turn waited for the abandoned permission request")
	}
	if fileExists(filepath.Join(e.cwd, "notes.txt")) {
		t.Error("the write ran after the cancel")
	}
}

// TestCloseKillsWhatCommandsLeft: session/close kills the background jobs
// and setsid children the session's commands left running, and only them.
func TestCloseKillsWhatCommandsLeft(t *testing.T) {
	e := newToolEnv(t, nil)
	otherCwd := filepath.Join(e.cwd, "other")
	if err := os.Mkdir(otherCwd, 0o755); err != nil {
		t.Fatal(err)
	}
	closed := e.newSession()
	res, err := e.conn.NewSession(e.ctx, acp.NewSessionRequest{Cwd: otherCwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	kept := res.SessionId
	e.ask(closed, "leave")
	e.ask(kept, "leave")
	closedPids := acptest.ReadPids(t, filepath.Join(e.cwd, "bg.pid"), filepath.Join(e.cwd, "sid.pid"))
	keptPids := acptest.ReadPids(t, filepath.Join(otherCwd, "bg.pid"), filepath.Join(otherCwd, "sid.pid"))
	t.Cleanup(func() {
		for _, pid := range append(closedPids, keptPids...) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	})
	if _, err := e.conn.CloseSession(e.ctx, acp.CloseSessionRequest{SessionId: closed}); err != nil {
		t.Fatal(err)
	}
	for _, pid := range closedPids {
		waitFor(t, func() bool { return !acptest.Alive(pid) })
	}
	for _, pid := range keptPids {
		if !acptest.Alive(pid) {
			t.Errorf("process %d of the other session was killed", pid)
		}
	}
}
