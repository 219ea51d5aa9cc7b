package protocol_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
)

const skillScript = `
rules:
  - match: "^\\$greetings Bob"
    steps:
      - toolCalls: [{name: read_skill, args: {name: greetings}}]
      - {text: "model read: {{last_tool_output}}"}
usage: true
`

// writeSkill writes <dir>/<folder>/SKILL.md.
func writeSkill(t *testing.T, dir, folder, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, folder), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, folder, "SKILL.md"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func commandNames(ups []acp.SessionUpdate) [][]string {
	var out [][]string
	for _, u := range ups {
		if c := u.AvailableCommandsUpdate; c != nil {
			var names []string
			for _, cmd := range c.AvailableCommands {
				names = append(names, cmd.Name)
			}
			out = append(out, names)
		}
	}
	return out
}

// TestSkillsAsCommands: a skill folder gives the commands, in order;
// `/greetings Bob` reaches the model as `$greetings Bob` with the note to
// read it, the model's read_skill returns the body and the skill's files,
// and the turn's recap counts it. A skill named compact is not announced.
func TestSkillsAsCommands(t *testing.T) {
	e := newEnvScript(t, skillScript, nil)
	dir := filepath.Join(e.cwd, ".mm", "skills")
	writeSkill(t, dir, "greetings", "---\nname: greetings\ndescription: Greet somebody with a festive message.\n---\nSay hello to the person named, with a festive flourish.\n")
	if err := os.WriteFile(filepath.Join(dir, "greetings", "card.txt"), []byte("🎉"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeSkill(t, dir, "bg-jobs", "---\nname: bg-jobs\ndescription: Start, wait on and stop a background job.\n---\nUse nohup.\n")
	writeSkill(t, dir, "compact", "---\nname: compact\ndescription: Shadowed.\n---\nx\n")
	writeSkill(t, dir, "broken", "no front matter at all\n")
	sid := e.newSession()

	cmds := commandNames(e.conn.Client.Updates(sid))
	if len(cmds) != 1 || strings.Join(cmds[0], " ") != "new compact bg-jobs greetings" {
		t.Fatalf("commands: %v", cmds)
	}
	for _, u := range e.conn.Client.Updates(sid) {
		if c := u.AvailableCommandsUpdate; c != nil {
			g := c.AvailableCommands[3]
			if g.Description != "Greet somebody with a festive message." || g.Input == nil || g.Input.Unstructured == nil || g.Input.Unstructured.Hint != "parameters, if this skill needs any" {
				t.Errorf("greetings command = %+v", g)
			}
		}
	}
	// The system prompt names the skills.
	if res := e.ask(sid, "/nosuch thing"); res.StopReason != acp.StopReasonEndTurn {
		t.Fatal(res)
	}
	msgs := e.requestMessages()
	if sys := msgs[0]["content"].(string); !strings.Contains(sys, "- greetings: Greet somebody") || !strings.Contains(sys, "read_skill") {
		t.Errorf("system prompt: %q", sys)
	}
	if last := msgs[len(msgs)-1]["content"]; last != "/nosuch thing" {
		t.Errorf("an unknown /name reached the model as %q", last)
	}

	e.conn.Client.Reset()
	if res := e.ask(sid, "/greetings Bob"); res.StopReason != acp.StopReasonEndTurn {
		t.Fatal(res)
	}
	msgs = e.requestMessages()
	var user string
	for _, m := range msgs {
		if m["role"] == "user" {
			user, _ = m["content"].(string)
		}
	}
	if !strings.HasPrefix(user, "$greetings Bob") || !strings.Contains(user, `call read_skill with {"name": "greetings"}`) {
		t.Errorf("the model read %q", user)
	}
	ups := e.conn.Client.Updates(sid)
	calls, _ := toolUpdates(ups)
	if len(calls) != 1 || calls[0].Title != "read_skill: greetings" || calls[0].Kind != acp.ToolKindRead {
		t.Fatalf("tool calls: %+v", calls)
	}
	text := acptest.Text(ups)
	if !strings.Contains(text, "festive flourish") || !strings.Contains(text, filepath.Join(dir, "greetings", "card.txt")) {
		t.Errorf("read_skill gave the model: %q", text)
	}
	if !strings.Contains(text, "📖 1 skill(s): greetings") {
		t.Errorf("no recap in %q", text)
	}
	if !strings.Contains(e.conn.Stderr.String(), "[acp] turn done: 0 command(s) · 0 file op(s) · 1 skill(s)") {
		t.Errorf("log: %s", e.conn.Stderr.String())
	}

	// A skill added later is found when a prompt names it, and the
	// commands are announced again.
	writeSkill(t, dir, "later", "---\nname: later\ndescription: Added after the session started.\n---\nbody\n")
	e.conn.Client.Reset()
	e.ask(sid, "use $later please")
	cmds = commandNames(e.conn.Client.Updates(sid))
	if len(cmds) != 1 || !strings.Contains(strings.Join(cmds[0], " "), "later") {
		t.Errorf("commands after adding a skill: %v", cmds)
	}
}

// hookScript asks for a command; the hooks decide.
const hookScript = `
rules:
  - match: "^echo$"
    steps:
      - toolCalls: [{name: bash, args: {command: "echo hi"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^loop$"
    steps:
      - toolCalls: [{name: bash, args: {command: "echo x >> count.txt"}}]
      - toolCalls: [{name: bash, args: {command: "echo x >> count.txt"}}]
      - toolCalls: [{name: bash, args: {command: "echo x >> count.txt"}}]
      - toolCalls: [{name: bash, args: {"command":"echo x >> count.txt"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^catenv$"
    steps:
      - toolCalls: [{name: bash, args: {command: "cat .env"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^ls$"
    steps:
      - toolCalls: [{name: bash, args: {command: "ls"}}]
      - {text: "done"}
usage: true
`

func writeHook(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/bash\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPreToolCallHookDenies: a deny comes before any permission is asked;
// the call is shown failed with the seed's title and text, and the model
// is told.
func TestPreToolCallHookDenies(t *testing.T) {
	hooks := t.TempDir()
	deny := writeHook(t, hooks, "deny.sh", `cat > "$(dirname "$0")/event.json"; echo '{"decision":"deny","reason":"no shell today"}'`)
	e := newEnvScript(t, hookScript, func(c *configs.Config) { c.Yolo = false; c.Hooks.PreToolCall = []string{deny} })
	sid := e.newSession()
	if res := e.ask(sid, "echo"); res.StopReason != acp.StopReasonEndTurn {
		t.Fatal(res)
	}
	if p := e.conn.Client.Permissions(); len(p) != 0 {
		t.Errorf("permission asked for a denied call: %+v", p)
	}
	calls, updates := toolUpdates(e.conn.Client.Updates(sid))
	if len(calls) != 1 || calls[0].Title != "bash: echo hi" || len(updates) != 1 {
		t.Fatalf("calls %+v updates %+v", calls, updates)
	}
	u := updates[0]
	if *u.Status != acp.ToolCallStatusFailed || u.Title == nil || *u.Title != "bash: echo hi — denied by a hook" ||
		u.Content[0].Content.Content.Text.Text != "[denied by a hook: no shell today]" {
		t.Errorf("update = %+v", u)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, "model read: [denied by a hook: no shell today]") {
		t.Errorf("the model read %q", text)
	}
	event, _ := os.ReadFile(filepath.Join(hooks, "event.json"))
	for _, want := range []string{`"event":"preToolCall"`, `"sessionId":"` + string(sid) + `"`, `"cwd":"` + e.cwd + `"`, `"tool":"bash"`, `"input":{"command":"echo hi"}`} {
		if !strings.Contains(string(event), want) {
			t.Errorf("the hook read %s, without %s", event, want)
		}
	}
}

// TestFailingHooksDoNotBlock: a hook that exits 1, times out or prints
// garbage is logged and the call runs.
func TestFailingHooksDoNotBlock(t *testing.T) {
	hooks := t.TempDir()
	lines := []string{
		writeHook(t, hooks, "fail.sh", "echo broken >&2; exit 1"),
		writeHook(t, hooks, "slow.sh", "sleep 30"),
		writeHook(t, hooks, "garbage.sh", "echo not json"),
	}
	e := newEnvScript(t, hookScript, func(c *configs.Config) { c.Hooks.PreToolCall = lines; c.Hooks.Timeout = 300 * 1e6 })
	sid := e.newSession()
	if res := e.ask(sid, "echo"); res.StopReason != acp.StopReasonEndTurn {
		t.Fatal(res)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, "model read: hi") {
		t.Errorf("the command did not run: %q", text)
	}
	log := e.conn.Stderr.String()
	for _, want := range []string{"🪝 preToolCall hook " + lines[0] + ": exited with status 1", "🪝 preToolCall hook " + lines[1] + ": timed out", "🪝 preToolCall hook " + lines[2] + ": printed invalid JSON"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestLoopDetector: the fourth identical call in a row (spacing and key
// order aside) is not run; the model is told why and the turn goes on.
func TestLoopDetector(t *testing.T) {
	e := newEnvScript(t, hookScript, nil)
	sid := e.newSession()
	if res := e.ask(sid, "loop"); res.StopReason != acp.StopReasonEndTurn {
		t.Fatal(res)
	}
	b, _ := os.ReadFile(filepath.Join(e.cwd, "count.txt"))
	if n := strings.Count(string(b), "x"); n != 3 {
		t.Errorf("the command ran %d times, want 3", n)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, "[not run: this is call 4 in a row to bash with the same arguments") {
		t.Errorf("the model read %q", text)
	}
}

// TestBashNamingASecretAsks: in yolo mode, a command that names .env asks
// every time; one that names nothing sensitive does not.
func TestBashNamingASecretAsks(t *testing.T) {
	e := newEnvScript(t, hookScript, nil)
	if err := os.WriteFile(filepath.Join(e.cwd, ".env"), []byte("TOKEN=s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sid := e.newSession()
	e.conn.Client.Permission = answer("allow_always")
	e.ask(sid, "ls")
	if n := len(e.conn.Client.Permissions()); n != 0 {
		t.Fatalf("ls asked %d time(s)", n)
	}
	for i := 1; i <= 2; i++ {
		e.ask(sid, "catenv")
		p := e.conn.Client.Permissions()
		if len(p) != i || *p[i-1].ToolCall.Title != "bash: cat .env" {
			t.Fatalf("permission requests: %+v", p)
		}
	}
	e.conn.Client.Permission = answer("reject")
	e.ask(sid, "catenv")
	if text := acptest.Text(e.conn.Client.Updates(sid)); strings.Count(text, "s3cret") != 2 || !strings.Contains(text, "[command rejected by the user]") {
		t.Errorf("the model read %q", text)
	}
}
