package protocol_test

import (
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"
)

const liveScript = `
rules:
  - match: "^count$"
    steps:
      - toolCalls: [{name: bash, args: {command: "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo line $i; sleep 0.1; done"}}]
      - {text: "counted"}
  - match: "^quiet$"
    steps:
      - toolCalls: [{name: bash, args: {command: "sleep 0.5"}}]
      - {text: "slept"}
`

// TestLiveBashOutput: while a command runs, its tool call shows the output
// so far, growing, in order, before it completes; the completion carries
// the whole output. A command that prints nothing shows no live view.
func TestLiveBashOutput(t *testing.T) {
	e := newEnvScript(t, liveScript, nil)
	sid := e.newSession()
	e.ask(sid, "count")
	_, updates := toolUpdates(e.conn.Client.Updates(sid))
	var views []string
	var final *acp.SessionToolCallUpdate
	for _, u := range updates {
		if u.Status != nil && *u.Status == acp.ToolCallStatusCompleted {
			final = u
			continue
		}
		if len(u.Content) == 1 && u.Content[0].Content != nil {
			if final != nil {
				t.Fatal("a live view came after the completion")
			}
			views = append(views, u.Content[0].Content.Content.Text.Text)
		}
	}
	// 1.2 s of output, a view at most every 200 ms: several, but not one a
	// line (the machine may be slow: no upper bound beyond the lines).
	if len(views) < 2 || len(views) > 12 {
		t.Fatalf("%d live views: %q", len(views), views)
	}
	for i, v := range views {
		if !strings.HasPrefix(v, "line 1\n") {
			t.Errorf("view %d does not start with the first line: %q", i, v)
		}
		if i > 0 && !strings.HasPrefix(v, views[i-1]) {
			t.Errorf("view %d does not extend view %d: %q then %q", i, i-1, views[i-1], v)
		}
	}
	if strings.Contains(views[len(views)-1], "[exit code") {
		t.Errorf("a live view holds the result: %q", views[len(views)-1])
	}
	if final == nil || !strings.Contains(final.Content[0].Content.Content.Text.Text, "line 12\n[exit code: 0]") {
		t.Fatalf("final update %+v", final)
	}

	e.conn.Client.Reset()
	e.ask(sid, "quiet")
	_, updates = toolUpdates(e.conn.Client.Updates(sid))
	for _, u := range updates {
		if u.Status == nil && len(u.Content) > 0 {
			t.Errorf("a command that printed nothing showed %+v", u.Content)
		}
	}
}
