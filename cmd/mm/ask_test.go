package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
)

// helperScript is the asked mm's model.
const helperScript = `
rules:
  - match: "^ping$"
    steps: [{text: "pong from the helper"}]
  - match: "^write$"
    steps:
      - toolCalls: [{name: write_file, args: {path: notes.txt, content: "from the helper\n"}}]
      - {text: "wrote it"}
  - match: "^form$"
    steps:
      - toolCalls: [{name: ask_user, args: {questions: [{question: "Color?", type: choice, options: [red, blue]}]}}]
      - {text: "helper read: {{last_tool_output}}"}
  - match: "^slow$"
    steps: [{sleep: 30s}]
`

// helperConfig writes the asked mm's config (scripted model, asks
// permission) and returns its path.
func helperConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	scriptPath := filepath.Join(dir, "helper.yaml")
	if err := os.WriteFile(scriptPath, []byte(helperScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "helper-config.yaml")
	cfg := fmt.Sprintf("model:\n  provider: scripted\n  script: %q\nyolo: false\nskills:\n  dirs: []\n", scriptPath)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgPath
}

// startAsking starts an mm that can ask another mm, named helper.
func startAsking(t *testing.T, extra string) (*acptest.Conn, context.Context, string, acp.SessionId) {
	t.Helper()
	conn, _, _ := startMM(t, fmt.Sprintf("agents:\n  - {name: helper, command: %q, args: [\"-acp\", \"-config\", %q]}\n%s", mmBin, helperConfig(t), extra))
	ctx := testwait.Context(t)
	if _, err := conn.InitForms(ctx); err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	return conn, ctx, cwd, sess.SessionId
}

// TestAskAgent: mm asks mm. The answer reaches the model; the helper's
// permission request and form are relayed to this editor, which decides;
// /ask is announced.
func TestAskAgent(t *testing.T) {
	conn, ctx, cwd, sid := startAsking(t, "")
	if err := conn.Client.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool {
		if c := u.AvailableCommandsUpdate; c != nil {
			for _, cmd := range c.AvailableCommands {
				if cmd.Name == "ask" {
					return true
				}
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Ask(ctx, sid, "ask ping"); err != nil {
		t.Fatal(err)
	}
	if text := acptest.Text(conn.Client.Updates(sid)); !strings.Contains(text, "model read: pong from the helper") {
		t.Fatalf("the model read %q", text)
	}
	calls := 0
	for _, u := range conn.Client.Updates(sid) {
		if u.ToolCall != nil && u.ToolCall.Title == "ask_agent: helper" && u.ToolCall.Kind == acp.ToolKindOther {
			calls++
		}
	}
	if calls != 1 {
		t.Errorf("%d ask_agent tool calls shown", calls)
	}

	// The helper asks to write a file: this editor is asked, and allows.
	conn.Client.Reset()
	if _, err := conn.Ask(ctx, sid, "ask write"); err != nil {
		t.Fatal(err)
	}
	perms := conn.Client.Permissions()
	if len(perms) != 1 || perms[0].SessionId != sid || !strings.HasPrefix(*perms[0].ToolCall.Title, "helper: write_file: notes.txt") {
		t.Fatalf("relayed permission requests: %+v", perms)
	}
	if b, _ := os.ReadFile(filepath.Join(cwd, "notes.txt")); string(b) != "from the helper\n" {
		t.Errorf("the helper did not write in the session's cwd: %q", b)
	}

	// The helper asks a question: this editor's form answers it.
	conn.Client.Reset()
	conn.Client.Elicit = func(p acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
		return acp.UnstableCreateElicitationResponse{Accept: &acp.UnstableCreateElicitationAccept{Action: "accept", Content: map[string]any{"q1": "blue"}}}, nil
	}
	if _, err := conn.Ask(ctx, sid, "ask form"); err != nil {
		t.Fatal(err)
	}
	forms := conn.Client.Forms()
	if len(forms) != 1 || forms[0].Form == nil || forms[0].Form.Message != "Color?" {
		t.Fatalf("relayed forms: %+v", forms)
	}
	if text := acptest.Text(conn.Client.Updates(sid)); !strings.Contains(text, `helper read: {"Color?": "blue"}`) {
		t.Errorf("the model read %q", text)
	}
}

// TestAskAgentPostAskAndCancel: a postAsk hook replaces the answer; a
// cancel of the asking turn reaches the helper, and closing the session
// leaves no helper process.
func TestAskAgentPostAskAndCancel(t *testing.T) {
	hook := filepath.Join(t.TempDir(), "replace.sh")
	if err := os.WriteFile(hook, []byte("#!/bin/bash\necho '{\"answer\":\"replaced by the hook\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	conn, ctx, _, sid := startAsking(t, fmt.Sprintf("hooks:\n  postAsk: [%q]\n", hook))
	if _, err := conn.Ask(ctx, sid, "ask ping"); err != nil {
		t.Fatal(err)
	}
	if text := acptest.Text(conn.Client.Updates(sid)); !strings.Contains(text, "model read: replaced by the hook") {
		t.Errorf("the model read %q", text)
	}
	if !strings.Contains(conn.Stderr.String(), "🪝 postAsk: ") {
		t.Errorf("no postAsk notice:\n%s", conn.Stderr.String())
	}

	done := make(chan acp.StopReason, 1)
	go func() {
		res, _ := conn.Ask(ctx, sid, "ask slow")
		done <- res.StopReason
	}()
	if err := conn.Client.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool {
		return u.ToolCallUpdate != nil && u.ToolCallUpdate.Status != nil && *u.ToolCallUpdate.Status == acp.ToolCallStatusInProgress
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the helper is probably starting its turn; either way, the cancel must end ours
	_ = conn.Cancel(ctx, acp.CancelNotification{SessionId: sid})
	select {
	case r := <-done:
		if r != acp.StopReasonCancelled {
			t.Fatalf("stopReason %s", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the cancel did not end the asking turn")
	}
	helpers := helperPids(t)
	if _, err := conn.CloseSession(ctx, acp.CloseSessionRequest{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	for _, pid := range helpers {
		waitUntil(t, fmt.Sprintf("the helper (%d) gone with the session", pid), func() bool { return !acptest.Alive(pid) })
	}
}

// helperPids lists the running helper mm processes of this test binary's
// mm (their command line names the helper config).
func helperPids(t *testing.T) []int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), "helper-config.yaml") && acptest.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatal("no helper process found")
	}
	return pids
}

// TestAskCommand: mm --ask prints the answer of the agent it starts.
func TestAskCommand(t *testing.T) {
	cfg := helperConfig(t)
	cmd := exec.Command(mmBin, "--ask", mmBin+" -acp -config "+cfg, "ping")
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "pong from the helper" {
		t.Fatalf("%q %v", out, err)
	}
	// A permission request is refused without --allow, allowed with it.
	for _, allow := range []bool{false, true} {
		dir := t.TempDir()
		args := []string{"--ask", mmBin + " -acp -config " + cfg, "write"}
		if allow {
			args = append(args, "--allow")
		}
		cmd := exec.Command(mmBin, args...)
		cmd.Dir = dir
		if out, err := cmd.Output(); err != nil {
			t.Fatalf("%q %v", out, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "notes.txt")); (err == nil) != allow {
			t.Errorf("allow=%v: notes.txt written: %v", allow, err == nil)
		}
	}
}
