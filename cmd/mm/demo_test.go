package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
)

// The demo's file as the tour writes it, then edits it.
const (
	demoWritten = "Hello from mm!\nThis file was written by the scripted demo model.\nDelete it, or type \"clean up\", when you are done.\n"
	demoEdited  = "Hello from mm!\nThis file was written, then edited, by the scripted demo model.\nDelete it, or type \"clean up\", when you are done.\n"
)

// demoCall is what the editor learnt of one tool call: its announcement,
// then the last status and content its updates gave.
type demoCall struct {
	title   string
	status  acp.ToolCallStatus
	content []acp.ToolCallContent
}

// demoCalls folds a session's tool_call and tool_call_update notifications
// into one record per call, in the order the calls were announced.
func demoCalls(updates []acp.SessionUpdate) []*demoCall {
	var order []*demoCall
	byID := map[acp.ToolCallId]*demoCall{}
	for _, u := range updates {
		switch {
		case u.ToolCall != nil:
			c := &demoCall{title: u.ToolCall.Title, status: u.ToolCall.Status, content: u.ToolCall.Content}
			byID[u.ToolCall.ToolCallId] = c
			order = append(order, c)
		case u.ToolCallUpdate != nil:
			c := byID[u.ToolCallUpdate.ToolCallId]
			if c == nil {
				continue
			}
			if u.ToolCallUpdate.Status != nil {
				c.status = *u.ToolCallUpdate.Status
			}
			if u.ToolCallUpdate.Content != nil {
				c.content = u.ToolCallUpdate.Content
			}
		}
	}
	return order
}

// find returns the calls whose title starts with the tool's name.
func find(calls []*demoCall, tool string) []*demoCall {
	var out []*demoCall
	for _, c := range calls {
		if strings.HasPrefix(c.title, tool+":") {
			out = append(out, c)
		}
	}
	return out
}

// diffOf returns a content list's only diff, or nil.
func diffOf(content []acp.ToolCallContent) *acp.ToolCallContentDiff {
	if len(content) != 1 {
		return nil
	}
	return content[0].Diff
}

// TestDemo plays configs/examples/demo.yaml as a user would in an editor:
// mm started by the editor in a directory of its own (not the config's),
// the prompts the demo's script suggests, every permission allowed. The
// editor must see each feature the demo promises, and the file must be on
// disk. A script path taken relative to mm's working directory instead of
// the config file's would not even start.
func TestDemo(t *testing.T) {
	testwait.Short(t, "the demo's tour, paced as a model streams (10 s)")
	config, err := filepath.Abs("../../configs/examples/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mmBin, "-acp", "-config", config)
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	conn, err := acptest.Process(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(5 * time.Second); _ = cmd.Process.Kill() })
	ctx := testwait.Context(t)
	if _, err := conn.Init(ctx); err != nil {
		t.Fatalf("initialize: %v\n%s", err, conn.Stderr.String())
	}
	cwd := t.TempDir()
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	sid := sess.SessionId
	file := filepath.Join(cwd, "mm-demo", "hello.txt")

	// The tour: whatever the user types first.
	res, err := conn.Ask(ctx, sid, "hi")
	if err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("tour: %+v %v\n%s", res, err, conn.Stderr.String())
	}
	ups := conn.Client.Updates(sid)
	calls := demoCalls(ups)
	for _, c := range calls {
		if c.status != acp.ToolCallStatusCompleted {
			t.Errorf("%s: %s, want completed", c.title, c.status)
		}
	}

	if bash := find(calls, "bash"); len(bash) != 1 || len(bash[0].content) != 1 || bash[0].content[0].Content == nil ||
		bash[0].content[0].Content.Content.Text == nil || !strings.Contains(bash[0].content[0].Content.Content.Text.Text, "hello from bash") {
		t.Errorf("bash: no completed call with its output: %+v", bash)
	}
	if w := find(calls, "write_file"); len(w) != 1 {
		t.Errorf("write_file: %d calls", len(w))
	} else if d := diffOf(w[0].content); d == nil || d.Path != file || d.OldText != nil || d.NewText != demoWritten {
		t.Errorf("write_file: content is not the diff of a new file: %+v", w[0].content)
	}
	if e := find(calls, "edit_file"); len(e) != 1 {
		t.Errorf("edit_file: %d calls", len(e))
	} else if d := diffOf(e[0].content); d == nil || d.Path != file || d.OldText == nil || *d.OldText != demoWritten || d.NewText != demoEdited {
		t.Errorf("edit_file: content is not the edit's diff: %+v", e[0].content)
	}

	// The plan: set with its first entry in progress, then ticked off
	// one entry after another.
	var plans [][]acp.PlanEntryStatus
	for _, u := range ups {
		if u.Plan != nil {
			var st []acp.PlanEntryStatus
			for _, e := range u.Plan.Entries {
				st = append(st, e.Status)
			}
			plans = append(plans, st)
		}
	}
	const ip, pe, co = acp.PlanEntryStatusInProgress, acp.PlanEntryStatusPending, acp.PlanEntryStatusCompleted
	want := [][]acp.PlanEntryStatus{{ip, pe, pe}, {co, pe, pe}, {co, co, pe}, {co, co, co}}
	if len(plans) != len(want) {
		t.Errorf("plan updates: %v, want %v", plans, want)
	} else {
		for i := range want {
			if !slices.Equal(plans[i], want[i]) {
				t.Errorf("plan update %d: %v, want %v", i+1, plans[i], want[i])
			}
		}
	}

	// yolo: false: every change was asked for, the file changes with
	// their diffs.
	asked := map[string]*acp.RequestPermissionRequest{}
	for _, p := range conn.Client.Permissions() {
		if p.ToolCall.Title != nil {
			tool, _, _ := strings.Cut(*p.ToolCall.Title, ":")
			asked[tool] = &p
		}
	}
	for _, tool := range []string{"plan", "bash", "write_file", "edit_file"} {
		if asked[tool] == nil {
			t.Errorf("no permission request for %s", tool)
		}
	}
	if p := asked["write_file"]; p != nil {
		if d := diffOf(p.ToolCall.Content); d == nil || d.OldText != nil || d.NewText != demoWritten {
			t.Errorf("write_file's permission request lacks the diff: %+v", p.ToolCall.Content)
		}
	}
	if p := asked["edit_file"]; p != nil {
		if d := diffOf(p.ToolCall.Content); d == nil || d.OldText == nil || *d.OldText != demoWritten || d.NewText != demoEdited {
			t.Errorf("edit_file's permission request lacks the diff: %+v", p.ToolCall.Content)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != demoEdited {
		t.Errorf("%s: %q, %v; want %q", file, b, err, demoEdited)
	}
	if text := acptest.Text(ups); !strings.Contains(text, "hello from bash") || !strings.Contains(text, "That was the tour") {
		t.Errorf("the tour's text: %q", text)
	}

	// The other prompts the script suggests.
	answer := func(prompt string) string {
		t.Helper()
		conn.Client.Reset()
		res, err := conn.Ask(ctx, sid, prompt)
		if err != nil || res.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("%s: %+v %v", prompt, res, err)
		}
		return acptest.Text(conn.Client.Updates(sid))
	}
	if text := answer("help"); !strings.Contains(text, "for the tour") || len(conn.Client.Permissions()) != 0 {
		t.Errorf("help: %q", text)
	}
	if _, err := conn.Ask(ctx, sid, "fail"); err == nil || !strings.Contains(err.Error(), "scripted failure") {
		t.Errorf("fail: %v, want the scripted failure", err)
	}
	// stall hangs after its first word until the user presses stop.
	conn.Client.Reset()
	stalled := make(chan acp.StopReason, 1)
	go func() {
		res, err := conn.Ask(ctx, sid, "stall")
		if err != nil {
			t.Errorf("stall: %v", err)
		}
		stalled <- res.StopReason
	}()
	if err := conn.Client.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
		t.Fatal(err)
	}
	if err := conn.Cancel(ctx, acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	if stop := <-stalled; stop != acp.StopReasonCancelled {
		t.Errorf("stall: stop reason %q after a cancel", stop)
	}
	// After an error and a cancel, the session answers as before.
	if text := answer("ping"); text != "pong" {
		t.Errorf("ping: %q", text)
	}
	if text := answer("/compact"); !strings.Contains(text, "compressed") {
		t.Errorf("/compact: %q", text)
	}
	if text := answer("clean up"); !strings.Contains(text, "removed mm-demo/") {
		t.Errorf("clean up: %q", text)
	}
	if _, err := os.Stat(filepath.Dir(file)); !os.IsNotExist(err) {
		t.Errorf("clean up left %s: %v", filepath.Dir(file), err)
	}
	if t.Failed() {
		t.Logf("mm's log:\n%s", conn.Stderr.String())
	}
}
