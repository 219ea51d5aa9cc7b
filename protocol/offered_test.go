package protocol_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mm-agent/mm/configs"
)

const offeredScript = `
rules:
  - match: "^navigate$"
    steps:
      - toolCalls: [{name: lsp, args: {action: hover, path: a.go, line: 1, column: 1}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^hello$"
    steps: [{text: "hi"}]
usage: true
`

// offeredTools are the names of the tools of the model server's last
// request.
func offeredTools(t *testing.T, e *env) []string {
	t.Helper()
	var names []string
	raw, _ := e.server.LastRequest()["tools"].([]any)
	for _, r := range raw {
		fn, _ := r.(map[string]any)["function"].(map[string]any)
		name, _ := fn["name"].(string)
		names = append(names, name)
	}
	return names
}

// TestToolsOfferedWhenTheyCanWork: with nothing configured, ask_agent, lsp
// and read_skill are not offered, and a call to one anyway is an unknown
// tool whose error names the tools there are; with an agent, a language
// server and a skill, all ten are.
func TestToolsOfferedWhenTheyCanWork(t *testing.T) {
	bare := []string{"bash", "read_file", "write_file", "edit_file", "plan", "ask_user", "fetch_content"}
	all := []string{"bash", "read_file", "write_file", "edit_file", "read_skill", "plan", "ask_user", "ask_agent", "fetch_content", "lsp"}

	e := newEnvScript(t, offeredScript, nil)
	sid := e.newSession()
	e.ask(sid, "hello")
	if got := offeredTools(t, e); !slices.Equal(got, bare) {
		t.Errorf("with nothing configured the model is offered %v, want %v", got, bare)
	}
	e.ask(sid, "navigate")
	msgs := e.requestMessages()
	out, _ := msgs[len(msgs)-1]["content"].(string)
	if !strings.Contains(out, `unknown tool "lsp"; the available tools are: bash, read_file, write_file, edit_file, plan, ask_user, fetch_content`) {
		t.Errorf("a call to lsp with no server gave the model %q", out)
	}

	e = newEnvScript(t, offeredScript, func(c *configs.Config) {
		c.Agents = []configs.Agent{{Name: "helper", Command: "false"}}
		c.LSP.Servers = map[string]string{"go": "gopls"}
	})
	writeSkill(t, filepath.Join(e.cwd, ".mm", "skills"), "greetings", "---\nname: greetings\ndescription: Greet somebody.\n---\nSay hello.\n")
	sid = e.newSession()
	e.ask(sid, "hello")
	if got := offeredTools(t, e); !slices.Equal(got, all) {
		t.Errorf("with an agent, a language server and a skill the model is offered %v, want %v", got, all)
	}
}
