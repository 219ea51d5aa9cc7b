package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
)

// What the model reads, seen from the model server: a real mm over ACP,
// the HTTP test server recording each request (docs/models.md, "What the
// model reads").

// readsScript reads two files of a subfolder, works past a budget, keeps
// a plan and summarises.
const readsScript = `
rules:
  - match: "^hello$"
    steps: [{text: "hi"}]
  - match: "^read sub$"
    steps:
      - toolCalls: [{name: read_file, args: {path: "sub/a.txt"}}]
      - toolCalls: [{name: read_file, args: {path: "sub/b.txt"}}]
      - {text: "read both"}
  - match: "^work$"
    steps:
      - toolCalls: [{name: bash, args: {command: "echo 1"}}]
      - toolCalls: [{name: bash, args: {command: "echo 2"}}]
      - toolCalls: [{name: bash, args: {command: "echo 3"}}]
      - toolCalls: [{name: bash, args: {command: "echo 4"}}]
      - toolCalls: [{name: bash, args: {command: "echo 5"}}]
      - toolCalls: [{name: bash, args: {command: "echo 6"}}]
  - match: "^\\[mm: this turn has used its"
    steps: [{text: "Done: echoed 1 to 4. Left: 5 and 6. Next: run echo 5."}]
  - match: "^plan$"
    steps:
      - toolCalls: [{name: plan, args: {action: set, entries: [{content: "write the parser", status: completed}, {content: "test the parser", status: in_progress}]}}]
      - {text: "planned"}
  - match: "^Summarise the conversation below"
    steps: [{text: "SUMMARY"}]
usage: true
`

// gitProject makes a git repository with an AGENTS.md at its root and a
// subfolder sub/ with its own, and returns its root.
func gitProject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"AGENTS.md":     "ROOT-RULES: run make check before finishing.\n",
		"sub/AGENTS.md": "SUB-RULES: files here are generated.\n",
		"sub/a.txt":     "alpha\n",
		"sub/b.txt":     "beta\n",
	}
	for name, text := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("git", "init", "-q", "-b", "main", dir).CombinedOutput(); err != nil {
		t.Skipf("git init: %v %s", err, out)
	}
	return dir
}

// messages returns the messages of the server's last request.
func messages(t *testing.T, req map[string]any) []map[string]any {
	t.Helper()
	raw, _ := req["messages"].([]any)
	out := make([]map[string]any, len(raw))
	for i, m := range raw {
		out[i], _ = m.(map[string]any)
	}
	if len(out) == 0 {
		t.Fatalf("the request has no messages: %v", req)
	}
	return out
}

// TestSystemMessageOverACP: the system message holds mm's prompt, the
// project's AGENTS.md and the environment block, and is the same on two
// turns of a session (the prompt prefix the server caches).
func TestSystemMessageOverACP(t *testing.T) {
	conn, _, srv := startMMScript(t, readsScript, "  contextWindow: 100000\n")
	dir := gitProject(t)
	ctx, sess := openSessionIn(t, conn, dir)
	if _, err := conn.Ask(ctx, sess.SessionId, "hello"); err != nil {
		t.Fatal(err)
	}
	first, _ := messages(t, srv.LastRequest())[0]["content"].(string)
	for _, want := range []string{
		"You are Bob, a coding agent", "# Workflow", // the full prompt: a large window
		"# Project instructions", "## " + filepath.Join(dir, "AGENTS.md") + " (for " + dir + "/)", "ROOT-RULES: run make check",
		"# Environment", "- Working directory: " + dir, "- Git: repository at " + dir + ", branch main (no commits yet)",
		"?? AGENTS.md", "- Approval: edits and commands run without asking (yolo)",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("the system message lacks %q:\n%s", want, first)
		}
	}
	if strings.Contains(first, "SUB-RULES") {
		t.Error("a subfolder's instructions are in the system message before the model worked there")
	}
	// The tree changes; the snapshot does not.
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Ask(ctx, sess.SessionId, "hello"); err != nil {
		t.Fatal(err)
	}
	if second, _ := messages(t, srv.LastRequest())[0]["content"].(string); second != first {
		t.Errorf("the system message changed between two turns:\nfirst:\n%s\nsecond:\n%s", first, second)
	}
	// An edited AGENTS.md is read again at the next turn.
	if err := os.WriteFile(filepath.Join(dir, "AGENTS.md"), []byte("ROOT-RULES, second edition\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(filepath.Join(dir, "AGENTS.md"), later, later)
	if _, err := conn.Ask(ctx, sess.SessionId, "hello"); err != nil {
		t.Fatal(err)
	}
	if third, _ := messages(t, srv.LastRequest())[0]["content"].(string); !strings.Contains(third, "ROOT-RULES, second edition") {
		t.Errorf("the edited AGENTS.md was not read again:\n%s", third)
	}
}

// TestSmallWindowCompactPrompt: a model with a small window reads mm's
// compact prompt, the environment and the instructions all the same.
func TestSmallWindowCompactPrompt(t *testing.T) {
	conn, _, srv := startMMScript(t, readsScript, "  contextWindow: 8192\n")
	dir := gitProject(t)
	ctx, sess := openSessionIn(t, conn, dir)
	if _, err := conn.Ask(ctx, sess.SessionId, "hello"); err != nil {
		t.Fatal(err)
	}
	system, _ := messages(t, srv.LastRequest())[0]["content"].(string)
	if strings.Contains(system, "# Workflow") || !strings.Contains(system, "Keep going until the task is done") ||
		!strings.Contains(system, "ROOT-RULES") || !strings.Contains(system, "# Environment") {
		t.Errorf("with an 8k window the system message is not the compact one:\n%s", system)
	}
	t.Logf("system message with an 8k window: %d bytes", len(system))
}

// TestNestedInstructionsOnce: a subfolder's AGENTS.md reaches the model
// after the result of the first call that touches a file there, and not
// after the second.
func TestNestedInstructionsOnce(t *testing.T) {
	conn, _, srv := startMMScript(t, readsScript, "  contextWindow: 100000\n")
	dir := gitProject(t)
	ctx, sess := openSessionIn(t, conn, dir)
	if _, err := conn.Ask(ctx, sess.SessionId, "read sub"); err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, m := range messages(t, srv.LastRequest()) {
		if m["role"] == "tool" {
			c, _ := m["content"].(string)
			tools = append(tools, c)
		}
	}
	if len(tools) != 2 {
		t.Fatalf("%d tool results, want 2: %q", len(tools), tools)
	}
	note := "[Project instructions from " + filepath.Join(dir, "sub", "AGENTS.md") + ". They apply to every file under " + filepath.Join(dir, "sub") + "/"
	if !strings.Contains(tools[0], "alpha") || !strings.Contains(tools[0], note) || !strings.Contains(tools[0], "SUB-RULES: files here are generated.") {
		t.Errorf("the first read's result lacks sub/AGENTS.md:\n%s", tools[0])
	}
	if strings.Contains(tools[1], "SUB-RULES") {
		t.Errorf("sub/AGENTS.md was shown twice:\n%s", tools[1])
	}
	// The user's view of the call is the tool's own output.
	for _, u := range conn.Client.Updates(sess.SessionId) {
		if tu := u.ToolCallUpdate; tu != nil && tu.RawOutput != nil && strings.Contains(fmt.Sprint(tu.RawOutput), "SUB-RULES") {
			t.Errorf("the instructions were shown to the user as the tool's output: %v", tu.RawOutput)
		}
	}
}

// TestLastCallSummarises: with turns.maxModelCalls 5, a model that keeps
// calling tools gets a fifth call without tools that asks where the work
// stands; the user reads its answer and the turn ends max_turn_requests.
func TestLastCallSummarises(t *testing.T) {
	conn, _, srv := startMMScript(t, readsScript, "  contextWindow: 100000\nturns:\n  maxModelCalls: 5\n")
	ctx, _, sess := openSession(t, conn)
	before := srv.Requests()
	res, err := conn.Ask(ctx, sess.SessionId, "work")
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != acp.StopReasonMaxTurnRequests {
		t.Errorf("stop reason %s, want max_turn_requests", res.StopReason)
	}
	if n := srv.Requests() - before; n != 5 {
		t.Errorf("%d model calls, want 5", n)
	}
	last := srv.LastRequest()
	if tools, ok := last["tools"]; ok {
		t.Errorf("the last call offers tools: %v", tools)
	}
	msgs := messages(t, last)
	if c, _ := msgs[len(msgs)-1]["content"].(string); msgs[len(msgs)-1]["role"] != "user" || !strings.HasPrefix(c, "[mm: this turn has used its 5 model calls (turns.maxModelCalls)") ||
		!strings.Contains(c, "what is done") || !strings.Contains(c, "what is left") || !strings.Contains(c, "next command") {
		t.Errorf("the last call does not end with the note: %v", msgs[len(msgs)-1])
	}
	if text := acptest.Text(conn.Client.Updates(sess.SessionId)); !strings.Contains(text, "Done: echoed 1 to 4. Left: 5 and 6.") {
		t.Errorf("the user did not get the summary: %q", text)
	}
	// The history stays one the server accepts, and the note is not in it.
	if _, err := conn.Ask(ctx, sess.SessionId, "hello"); err != nil {
		t.Fatal(err)
	}
	for _, m := range messages(t, srv.LastRequest()) {
		if c, _ := m["content"].(string); strings.HasPrefix(c, "[mm: this turn has used") {
			t.Error("the last call's note stayed in the history")
		}
	}
}

// TestCompactRequestKeepsTheTask: /compact asks for a hand-off with the
// sections the next model needs and the current plan, and the summary
// comes back framed as context, not as a request.
func TestCompactRequestKeepsTheTask(t *testing.T) {
	conn, _, srv := startMMScript(t, readsScript, "  contextWindow: 100000\ncontext:\n  keepLastTurns: 1\n")
	ctx, _, sess := openSession(t, conn)
	for _, p := range []string{"plan", "hello", "hello"} {
		if _, err := conn.Ask(ctx, sess.SessionId, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Ask(ctx, sess.SessionId, "/compact"); err != nil {
		t.Fatal(err)
	}
	msgs := messages(t, srv.LastRequest())
	ask, _ := msgs[1]["content"].(string)
	for _, want := range []string{
		"Summarise the conversation below", "## Goal", "## Constraints and preferences", "## Done", "## In progress",
		"## Next steps", "## Files", "## Commands and errors", "- [completed] write the parser", "- [in_progress] test the parser",
		"Write at most 3000 words.",
	} {
		if !strings.Contains(ask, want) {
			t.Errorf("the compaction request lacks %q:\n%.3000s", want, ask)
		}
	}
	if _, err := conn.Ask(ctx, sess.SessionId, "hello"); err != nil {
		t.Fatal(err)
	}
	if c, _ := messages(t, srv.LastRequest())[1]["content"].(string); !strings.HasPrefix(c, "[The summary below replaces the earlier part of this conversation") ||
		!strings.Contains(c, "not a new request from the user") || !strings.HasSuffix(c, "SUMMARY") {
		t.Errorf("the summary is not framed as context: %q", c)
	}
}

// TestModelServerNotThere: with nothing listening on the configured local
// URL, the first prompt fails at once, naming the URL and how to start a
// server, with no retry waits (model.retries is 3 by default).
func TestModelServerNotThere(t *testing.T) {
	dir := t.TempDir()
	url := closedURL(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("model:\n  provider: openai\n  baseURL: "+url+"\n  contextWindow: 100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mmBin, "-acp", "-config", cfg)
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	conn, err := acptest.Process(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(5 * time.Second); _ = cmd.Process.Kill() })
	ctx, _, sess := openSession(t, conn)
	start := time.Now()
	_, err = conn.Ask(ctx, sess.SessionId, "hello")
	t.Logf("the turn failed after %v: %v", time.Since(start), err)
	if err == nil {
		t.Fatal("a prompt with no model server succeeded")
	}
	for _, want := range []string{"connection refused (" + url + "): no model server is running there", "llama-server -m MODEL.gguf --port", "model.baseURL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	for _, u := range conn.Client.Updates(sess.SessionId) {
		if th := u.AgentThoughtChunk; th != nil && th.Content.Text != nil && strings.Contains(th.Content.Text.Text, "retrying") {
			t.Errorf("a local server that is not there was retried: %q", th.Content.Text.Text)
		}
	}
}

// closedURL is a model URL on this machine where nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("http://127.0.0.1:%d/v1", freePorts(t, 1)[0])
}

// TestOwnPromptFile: prompt.systemFile replaces mm's prompt (systemMode:
// replace) with {{cwd}} filled in; the instructions and the environment
// still follow.
func TestOwnPromptFile(t *testing.T) {
	own := filepath.Join(t.TempDir(), "mine.md")
	if err := os.WriteFile(own, []byte("You are Ada. You work in {{cwd}}.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conn, _, srv := startMMScript(t, readsScript, fmt.Sprintf("  contextWindow: 100000\nprompt:\n  systemFile: %s\n  systemMode: replace\n", own))
	dir := gitProject(t)
	ctx, sess := openSessionIn(t, conn, dir)
	if _, err := conn.Ask(ctx, sess.SessionId, "hello"); err != nil {
		t.Fatal(err)
	}
	system, _ := messages(t, srv.LastRequest())[0]["content"].(string)
	if !strings.HasPrefix(system, "You are Ada. You work in "+dir+".\n") || strings.Contains(system, "You are Bob") ||
		!strings.Contains(system, "ROOT-RULES") || !strings.Contains(system, "# Environment") {
		t.Errorf("the system message:\n%s", system)
	}
}
