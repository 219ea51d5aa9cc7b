package protocol_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
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

// nestedPage is the page of issue 18: 250 nested lists, then items in the
// innermost one until the page is size bytes long. Its nesting stays under
// the HTML parser's limit of 512 open elements, and every item sits 250
// lists deep: converted as it is, each of the 250 levels copies and
// indents everything inside it again.
func nestedPage(size int) string {
	head := strings.Repeat("<ul><li>", 250)
	return head + strings.Repeat("<li>a", (size-len(head))/len("<li>a"))
}

// hostileEnv serves hostile pages and a script that fetches them, on an
// agent that runs four turns at once, as a user with other sessions has.
func hostileEnv(t *testing.T, pages map[string]func(http.ResponseWriter)) (*env, *httptest.Server) {
	t.Helper()
	return hostileEnvThen(t, pages, `{text: "read it"}`)
}

// hostileEnvThen is hostileEnv whose model, once it has read a page, takes
// the step then.
func hostileEnvThen(t *testing.T, pages map[string]func(http.ResponseWriter), then string) (*env, *httptest.Server) {
	t.Helper()
	mux := http.NewServeMux()
	var rules strings.Builder
	for path, serve := range pages {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			serve(w)
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for path := range pages {
		fmt.Fprintf(&rules, `
  - match: "^%[1]s$"
    steps:
      - toolCalls: [{name: fetch_content, args: {url: "%[2]s/%[1]s"}}]
      - %[3]s`, strings.TrimPrefix(path, "/"), srv.URL, then)
	}
	script := "rules:" + rules.String() + `
  - match: "^ping$"
    steps: [{text: "pong"}]
usage: true
`
	return newEnvScript(t, script, func(c *configs.Config) {
		c.Turns.Concurrency = 4
		// The conversion's cost is on trial, not tools.fetch.timeout: under
		// -race on a busy machine a 5 MiB page takes far longer than 30 s.
		c.Tools.Fetch.Timeout = testwait.Hang
	}), srv
}

// strayEndTags is the page that costs the parser the most within its
// bounds: end tags that close nothing, 120 elements deep, each of which
// has the parser look through all the open elements.
func strayEndTags(size int) string {
	head := strings.Repeat("<span>", 120)
	return head + strings.Repeat("</p>", (size-len(head))/len("</p>"))
}

// deepLists is lists 30 deep, filled with items: every item is indented 30
// levels, and every level copies all it holds.
func deepLists(size int) string {
	head := strings.Repeat("<ul><li>", 30)
	return head + strings.Repeat("<li>item", (size-len(head))/len("<li>item"))
}

// TestFetchHostileHTML: the page of issue 18 (about 1 MB), the same page at
// the 5 MiB body limit, and the two pages that cost the conversion the most
// within its bounds convert in bounded time and memory while another
// session plays ping → pong, and the model reads what was converted with a
// note saying what was cut (the two costliest pages without the race
// detector only, which slows the parser tenfold). Before the conversion was
// bounded, the 1 MB page took 245 s of CPU and 1.1 GB, and nothing could
// cancel it.
func TestFetchHostileHTML(t *testing.T) {
	testwait.Short(t, "converting hostile pages of up to 5 MiB")
	pages := []struct{ name, page, note string }{
		{"nested", nestedPage(1 << 20), "the page is cut where its elements nest deeper than 128"},
		{"nested5m", nestedPage(5 << 20), "the page is cut where its elements nest deeper than 128"},
	}
	if !raceBuild {
		pages = append(pages, []struct{ name, page, note string }{
			{"stray5m", strayEndTags(5 << 20), "the page is cut after 200000 tags, the limit"},
			{"lists5m", deepLists(5 << 20), "lists and quotes nested deeper than 8 are flattened to plain text"},
		}...)
	}
	serve := map[string]func(http.ResponseWriter){}
	for _, p := range pages {
		serve["/"+p.name] = func(w http.ResponseWriter) { fmt.Fprint(w, p.page) }
	}
	e, srv := hostileEnv(t, serve)
	sid, other := e.newSession(), e.newSession()
	for _, p := range pages {
		e.conn.Client.Reset()
		var res acp.PromptResponse
		var err error
		// Only a hang ends the turn early (e.ctx): the figures are logged,
		// not asserted.
		f := measureAttack(t, e.ctx, e.conn, other, func() {
			res, err = e.conn.Ask(e.ctx, sid, p.name)
		})
		t.Logf("%s (%d bytes): %s", p.name, len(p.page), f)
		if err != nil {
			t.Fatalf("%s: the turn did not end: %v", p.name, err)
		}
		// What the model read is the call's result, which its last update
		// shows; the scripted model does not echo it, so that the turn
		// costs what the fetch costs.
		_, updates := toolUpdates(e.conn.Client.Updates(sid))
		var read string
		if len(updates) > 0 && len(updates[len(updates)-1].Content) > 0 && updates[len(updates)-1].Content[0].Content != nil {
			read = updates[len(updates)-1].Content[0].Content.Content.Text.Text
		}
		head, _, _ := strings.Cut(read, "\n")
		if res.StopReason != acp.StopReasonEndTurn || !strings.Contains(head, srv.URL+"/"+p.name+" · text/html → Markdown") || !strings.Contains(head, p.note) {
			t.Errorf("%s: %s, the model read %.300q", p.name, res.StopReason, read)
		}
	}
}

// TestFetchCancelDuringConversion: a cancel that lands while a hostile
// page is being converted ends the turn, and the session goes on. The
// model never answers once it has read the page, so that the cancel is the
// only way the turn ends, however fast the conversion is: the log says
// whether the cancel beat it.
func TestFetchCancelDuringConversion(t *testing.T) {
	page := strayEndTags(5 << 20)
	sent := make(chan struct{}, 1)
	e, _ := hostileEnvThen(t, map[string]func(http.ResponseWriter){"/stray5m": func(w http.ResponseWriter) {
		fmt.Fprint(w, page)
		sent <- struct{}{}
	}}, `{sleep: 1h}`)
	sid := e.newSession()
	done := make(chan acp.PromptResponse, 1)
	go func() {
		res, err := e.conn.Ask(e.ctx, sid, "stray5m")
		if err != nil {
			t.Errorf("cancelled prompt answered an error: %v", err)
		}
		done <- res
	}()
	<-sent
	// The server has written the whole body: the fetch reads its end and
	// starts converting within milliseconds.
	time.Sleep(20 * time.Millisecond)
	start, asked := time.Now(), e.server.Requests()
	if err := e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		t.Logf("cancel answered in %v (%s); the conversion had ended first: %v", time.Since(start), res.StopReason, asked > 1)
		if res.StopReason != acp.StopReasonCancelled {
			t.Errorf("stopReason = %s", res.StopReason)
		}
	case <-time.After(testwait.Hang):
		t.Fatalf("the cancel was not answered within %v", testwait.Hang)
	}
	if res := e.ask(sid, "ping"); res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("the session after the cancel: %s", res.StopReason)
	}
}
