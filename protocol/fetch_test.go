package protocol_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/protocol/acptest"
)

// fetchEnv serves pages on a local HTTP server and a script whose rules
// fetch them.
func fetchEnv(t *testing.T, edit func(*configs.Config)) (*env, *httptest.Server) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>Doc</title><script>alert("x")</script></head><body><h1>Install</h1><ul><li>run <code>make</code></li></ul><a href="/next">next</a></body></html>`)
	})
	mux.HandleFunc("/logo.png", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	script := fmt.Sprintf(`
rules:
  - match: "^page$"
    steps:
      - toolCalls: [{name: fetch_content, args: {url: "%[1]s/page"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^png$"
    steps:
      - toolCalls: [{name: fetch_content, args: {url: "%[1]s/logo.png"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^loop$"
    steps:
      - toolCalls: [{name: fetch_content, args: {url: "%[1]s/loop"}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^save$"
    steps:
      - toolCalls: [{name: fetch_content, args: {url: "%[1]s/page", output: "docs/install.md"}}]
      - {text: "model read: {{last_tool_output}}"}
usage: true
`, srv.URL)
	return newEnvScript(t, script, edit), srv
}

// TestFetchContent: HTML becomes Markdown, a binary file and a redirect
// loop are refused with a message the model reads, and reading never asks.
func TestFetchContent(t *testing.T) {
	e, srv := fetchEnv(t, func(c *configs.Config) { c.Yolo = false })
	sid := e.newSession()
	e.ask(sid, "page")
	calls, _ := toolUpdates(e.conn.Client.Updates(sid))
	if len(calls) != 1 || calls[0].Title != "fetch_content: "+srv.URL+"/page" || calls[0].Kind != acp.ToolKindFetch {
		t.Fatalf("calls: %+v", calls)
	}
	text := acptest.Text(e.conn.Client.Updates(sid))
	for _, want := range []string{"# Install", "- run `make`", "(" + srv.URL + "/next)", "text/html → Markdown"} {
		if !strings.Contains(text, want) {
			t.Errorf("the model read %q, without %q", text, want)
		}
	}
	if strings.Contains(text, "alert") {
		t.Errorf("script content reached the model: %q", text)
	}
	if n := len(e.conn.Client.Permissions()); n != 0 {
		t.Errorf("reading a page asked %d time(s)", n)
	}
	for prompt, want := range map[string]string{"png": "is a binary file (image/png", "loop": "redirect"} {
		e.conn.Client.Reset()
		e.ask(sid, prompt)
		if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, want) {
			t.Errorf("%s: the model read %q", prompt, text)
		}
	}
}

// TestFetchContentOutput: saving asks permission (not in yolo), writes the
// file and shows the change as a diff.
func TestFetchContentOutput(t *testing.T) {
	e, srv := fetchEnv(t, func(c *configs.Config) { c.Yolo = false })
	sid := e.newSession()
	if err := os.Mkdir(filepath.Join(e.cwd, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.ask(sid, "save")
	perms := e.conn.Client.Permissions()
	if len(perms) != 1 {
		t.Fatalf("%d permission requests", len(perms))
	}
	// The user approves a write: the request names the file, in its title
	// as the model gave it and in its content as the absolute path that
	// will be written, not only the URL.
	target := filepath.Join(e.cwd, "docs", "install.md")
	tc := perms[0].ToolCall
	if tc.Title == nil || !strings.Contains(*tc.Title, srv.URL+"/page") || !strings.Contains(*tc.Title, "docs/install.md") {
		t.Errorf("permission title %q does not name the file written", deref(tc.Title))
	}
	var shown []string
	for _, c := range tc.Content {
		if c.Content != nil && c.Content.Content.Text != nil {
			shown = append(shown, c.Content.Content.Text.Text)
		}
	}
	if len(shown) != 1 || !strings.Contains(shown[0], target) || !strings.Contains(shown[0], "new file") {
		t.Errorf("permission content %q does not say which file is written", shown)
	}
	if len(tc.Locations) != 1 || tc.Locations[0].Path != target {
		t.Errorf("permission locations %+v", tc.Locations)
	}
	b, err := os.ReadFile(filepath.Join(e.cwd, "docs", "install.md"))
	if err != nil || !strings.Contains(string(b), "# Install") {
		t.Fatalf("saved %q %v", b, err)
	}
	_, updates := toolUpdates(e.conn.Client.Updates(sid))
	last := updates[len(updates)-1]
	if *last.Status != acp.ToolCallStatusCompleted || last.Content[0].Diff == nil || last.Content[0].Diff.Path != filepath.Join(e.cwd, "docs", "install.md") {
		t.Errorf("final update: %+v", last)
	}
	// Saving again would replace the file, and the request says so.
	e.conn.Client.Reset()
	e.conn.Client.Permission = answer("reject")
	e.ask(sid, "save")
	if perms := e.conn.Client.Permissions(); len(perms) != 1 || len(perms[0].ToolCall.Content) != 1 ||
		perms[0].ToolCall.Content[0].Content == nil || !strings.Contains(perms[0].ToolCall.Content[0].Content.Content.Text.Text, "replaces") {
		t.Errorf("the request to overwrite: %+v", perms)
	}
	e.conn.Client.Reset()
	if err := os.Remove(filepath.Join(e.cwd, "docs", "install.md")); err != nil {
		t.Fatal(err)
	}
	e.ask(sid, "save")
	if fileExists(filepath.Join(e.cwd, "docs", "install.md")) {
		t.Error("a rejected save wrote the file")
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
