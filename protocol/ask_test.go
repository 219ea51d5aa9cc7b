package protocol_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
)

const askScript = `
rules:
  - match: "^plan$"
    steps:
      - toolCalls: [{name: plan, args: {action: set, entries: [{content: parse}, {content: test, priority: high}]}}]
      - toolCalls: [{name: plan, args: {action: update, index: 1, status: completed}}]
      - {text: "planned"}
  - match: "^unplan$"
    steps:
      - toolCalls: [{name: plan, args: {action: clear}}]
      - {text: "cleared"}
  - match: "^ask4$"
    steps:
      - toolCalls: [{name: ask_user, args: {questions: [
          {question: "Which db?", type: choice, options: [pg, sqlite], default: pg},
          {question: "Which tags?", type: multi, options: [a, b]},
          {question: "Name?", type: text},
          {question: "Go ahead?", type: confirm, default: true}]}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^choose$"
    steps:
      - toolCalls: [{name: ask_user, args: {questions: [
          {question: "Which db?", type: choice, options: [pg, sqlite]},
          {question: "Go ahead?", type: confirm}]}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^name$"
    steps:
      - toolCalls: [{name: ask_user, args: {questions: [{question: "Name?", type: text}]}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^twice$"
    steps:
      - toolCalls: [{name: ask_user, args: {questions: [{question: "Name?", type: text}, {question: " Name? ", type: text}]}}]
      - {text: "model read: {{last_tool_output}}"}
usage: true
`

func plans(ups []acp.SessionUpdate) [][]acp.PlanEntry {
	var out [][]acp.PlanEntry
	for _, u := range ups {
		if u.Plan != nil {
			out = append(out, u.Plan.Entries)
		}
	}
	return out
}

// TestPlan: set and update send the whole plan each time; it is kept in
// the session file and replayed by session/load after the history; clear
// empties it.
func TestPlan(t *testing.T) {
	e := newEnvScript(t, askScript, func(c *configs.Config) { c.Sessions.Enabled = true })
	sid := e.newSession()
	e.ask(sid, "plan")
	p := plans(e.conn.Client.Updates(sid))
	if len(p) != 2 || len(p[0]) != 2 || p[0][0].Status != "pending" || p[0][1].Priority != "high" || p[1][0].Status != "completed" || p[1][1].Status != "pending" {
		t.Fatalf("plan updates: %+v", p)
	}
	if _, err := e.conn.CloseSession(e.ctx, acp.CloseSessionRequest{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	e.conn.Client.Reset()
	if _, err := e.conn.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	ups := e.conn.Client.Updates(sid)
	if len(ups) < 3 || ups[len(ups)-2].Plan == nil || ups[len(ups)-1].AvailableCommandsUpdate == nil {
		t.Fatalf("replay does not end with the plan, then the commands: %d updates", len(ups))
	}
	if got := ups[len(ups)-2].Plan.Entries; len(got) != 2 || got[0].Status != "completed" {
		t.Errorf("replayed plan: %+v", got)
	}
	e.conn.Client.Reset()
	e.ask(sid, "unplan")
	if p := plans(e.conn.Client.Updates(sid)); len(p) != 1 || len(p[0]) != 0 {
		t.Errorf("after clear: %+v", p)
	}
}

// TestAskUserForm: ask_user through a client that shows forms: one
// elicitation/create per call, as the seed's table says, written after its
// tool_call; each answer reaches the model.
func TestAskUserForm(t *testing.T) {
	e := newEnvScript(t, askScript, nil)
	if _, err := e.conn.InitForms(e.ctx); err != nil {
		t.Fatal(err)
	}
	sid := e.newSession()
	e.conn.Client.Elicit = func(p acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
		return acp.UnstableCreateElicitationResponse{Accept: &acp.UnstableCreateElicitationAccept{Action: "accept",
			Content: map[string]any{"q1": "sqlite", "q2": []any{"b"}, "q3": "Bob", "q4": false}}}, nil
	}
	e.ask(sid, "ask4")
	forms := e.conn.Client.Forms()
	if len(forms) != 1 || forms[0].Form == nil || forms[0].Form.Message != "The agent has 4 questions for you." {
		t.Fatalf("forms: %+v", forms)
	}
	f := forms[0].Form
	if got := f.RequestedSchema.Required; strings.Join(got, ",") != "q1,q2,q3,q4" {
		t.Errorf("required: %v", got)
	}
	q1 := f.RequestedSchema.Properties["q1"].(map[string]any)
	if q1["title"] != "Which db?" || q1["default"] != "pg" || q1["type"] != "string" {
		t.Errorf("q1: %v", q1)
	}
	calls, _ := toolUpdates(e.conn.Client.Updates(sid))
	if len(calls) != 1 || calls[0].Title != "ask_user: 4 questions" || calls[0].Kind != acp.ToolKindOther {
		t.Fatalf("calls: %+v", calls)
	}
	callID := string(calls[0].ToolCallId)
	scope := f.Meta["mm.elicitationScope"].(map[string]any)
	if scope["sessionId"] != string(sid) || scope["toolCallId"] != callID {
		t.Errorf("scope: %v", scope)
	}
	// On the wire: sessionId and toolCallId at the top, after the tool_call.
	out := e.conn.Stdout.String()
	req := strings.Index(out, `"method":"elicitation/create"`)
	if req < 0 || strings.Index(out, `"toolCallId":"`+callID+`","title"`) > req ||
		!strings.Contains(out[req:], `"sessionId":"`+string(sid)+`","toolCallId":"`+callID+`"`) {
		t.Errorf("elicitation/create on the wire:\n%s", out)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, `model read: {"Which db?": "sqlite", "Which tags?": ["b"], "Name?": "Bob", "Go ahead?": false}`) {
		t.Errorf("the model read %q", text)
	}

	for _, tc := range []struct {
		answer acp.UnstableCreateElicitationResponse
		err    error
		want   string
	}{
		{acp.UnstableCreateElicitationResponse{Decline: &acp.UnstableCreateElicitationDecline{Action: "decline"}}, nil, "model read: declined"},
		{acp.UnstableCreateElicitationResponse{Cancel: &acp.UnstableCreateElicitationCancel{Action: "cancel"}}, nil, "model read: cancelled"},
		{acp.UnstableCreateElicitationResponse{}, acp.NewInternalError(map[string]any{"error": "no forms today"}), "model read: no one can be asked"},
	} {
		e.conn.Client.Reset()
		e.conn.Client.Elicit = func(acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
			return tc.answer, tc.err
		}
		e.ask(sid, "name")
		if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, tc.want) {
			t.Errorf("want %q, the model read %q", tc.want, text)
		}
	}
}

// TestCancelWhileAFormWaits: the turn answers cancelled at once, and the
// client is told the request is abandoned.
func TestCancelWhileAFormWaits(t *testing.T) {
	e := newEnvScript(t, askScript, nil)
	if _, err := e.conn.InitForms(e.ctx); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	e.conn.Client.Elicit = func(acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
		<-release
		return acp.UnstableCreateElicitationResponse{Decline: &acp.UnstableCreateElicitationDecline{Action: "decline"}}, nil
	}
	sid := e.newSession()
	done := make(chan acp.StopReason, 1)
	go func() {
		res, _ := e.conn.Ask(e.ctx, sid, "name")
		done <- res.StopReason
	}()
	waitFor(t, func() bool { return len(e.conn.Client.Forms()) == 1 })
	_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid})
	select {
	case r := <-done:
		if r != acp.StopReasonCancelled {
			t.Fatalf("stopReason %s", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the turn waited for the form")
	}
	waitFor(t, func() bool { return strings.Contains(e.conn.Stdout.String(), `"method":"$/cancel_request"`) })
}

// TestAskUserWithoutForms: a client without forms gets one permission
// request per question when every question is a choice or a confirm;
// otherwise the model hears that no one can be asked.
func TestAskUserWithoutForms(t *testing.T) {
	e := newEnvScript(t, askScript, nil)
	sid := e.newSession()
	e.conn.Client.Permission = func(p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: "1"}}}, nil
	}
	e.ask(sid, "choose")
	perms := e.conn.Client.Permissions()
	if len(perms) != 2 || *perms[0].ToolCall.Title != "? Which db?" || *perms[1].ToolCall.Title != "? Go ahead?" || *perms[0].ToolCall.Kind != acp.ToolKindOther {
		t.Fatalf("permission requests: %+v", perms)
	}
	var opts []string
	for _, o := range perms[0].Options {
		opts = append(opts, string(o.OptionId)+"="+o.Name+"/"+string(o.Kind))
	}
	if strings.Join(opts, " ") != "0=pg/allow_once 1=sqlite/allow_once decline=Decline/reject_once" {
		t.Errorf("options: %v", opts)
	}
	if perms[1].Options[0].Name != "Yes" || perms[1].Options[1].Name != "No" {
		t.Errorf("confirm options: %+v", perms[1].Options)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, `model read: {"Which db?": "sqlite", "Go ahead?": false}`) {
		t.Errorf("the model read %q", text)
	}
	e.conn.Client.Reset()
	e.conn.Client.Permission = answer("decline")
	e.ask(sid, "choose")
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, "model read: declined") {
		t.Errorf("decline: %q", text)
	}
	e.conn.Client.Reset()
	e.ask(sid, "name")
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, "model read: no one can be asked") || len(e.conn.Client.Permissions()) != 0 {
		t.Errorf("a text question without forms: %q", text)
	}
}

// TestAskUserSameQuestionTwice: two questions with the same text would
// give the model two answers under one JSON key; the call fails before
// anyone is asked, with a reason the model reads.
func TestAskUserSameQuestionTwice(t *testing.T) {
	e := newEnvScript(t, askScript, nil)
	if _, err := e.conn.InitForms(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.conn.Client.Elicit = func(acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
		return acp.UnstableCreateElicitationResponse{Accept: &acp.UnstableCreateElicitationAccept{Action: "accept",
			Content: map[string]any{"q1": "Ann", "q2": "Bob"}}}, nil
	}
	sid := e.newSession()
	e.ask(sid, "twice")
	text := acptest.Text(e.conn.Client.Updates(sid))
	if want := `model read: [error: ask_user: question 2 repeats question 1 ("Name?"); ask each question once]`; !strings.Contains(text, want) {
		t.Errorf("the model read %q, want %q", text, want)
	}
	if n := len(e.conn.Client.Forms()); n != 0 {
		t.Errorf("%d form(s) sent", n)
	}
	if _, updates := toolUpdates(e.conn.Client.Updates(sid)); len(updates) == 0 || updates[len(updates)-1].Status == nil || *updates[len(updates)-1].Status != acp.ToolCallStatusFailed {
		t.Errorf("the call did not fail: %+v", updates)
	}
}

// TestAskUserWrongAnswers: an editor whose answers do not fit the form (a
// boolean for a multi, a choice not offered, a number for a text, one
// missing; without forms, an option that was not offered) fails the call
// with a one-line reason the model reads, instead of handing it null.
func TestAskUserWrongAnswers(t *testing.T) {
	e := newEnvScript(t, askScript, nil)
	if _, err := e.conn.InitForms(e.ctx); err != nil {
		t.Fatal(err)
	}
	sid := e.newSession()
	good := map[string]any{"q1": "sqlite", "q2": []any{"b"}, "q3": "Bob", "q4": false}
	for _, tc := range []struct {
		key  string
		val  any
		want string
	}{
		{"q2", true, `the editor's answers do not fit the questions: question 2 ("Which tags?") is a multi, and its answer is true, not a list of its options, each at most once`},
		{"q2", []any{"b", "z"}, `the editor's answers do not fit the questions: question 2 ("Which tags?") is a multi, and its answer is ["b","z"], not a list of its options, each at most once`},
		{"q1", "mysql", `the editor's answers do not fit the questions: question 1 ("Which db?") is a choice, and its answer is "mysql", not one of its options`},
		{"q3", 42, `the editor's answers do not fit the questions: question 3 ("Name?") is a text, and its answer is 42, not a string`},
		{"q4", "yes", `the editor's answers do not fit the questions: question 4 ("Go ahead?") is a confirm, and its answer is "yes", not true or false`},
		{"q4", nil, `the editor's answers do not fit the questions: question 4 ("Go ahead?") has no answer`},
	} {
		content := map[string]any{}
		for k, v := range good {
			content[k] = v
		}
		if tc.val == nil {
			delete(content, tc.key)
		} else {
			content[tc.key] = tc.val
		}
		e.conn.Client.Reset()
		e.conn.Client.Elicit = func(acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
			return acp.UnstableCreateElicitationResponse{Accept: &acp.UnstableCreateElicitationAccept{Action: "accept", Content: content}}, nil
		}
		e.ask(sid, "ask4")
		ups := e.conn.Client.Updates(sid)
		if text := acptest.Text(ups); !strings.Contains(text, "model read: "+tc.want) {
			t.Errorf("%s = %v: the model read %q, want %q", tc.key, tc.val, text, tc.want)
		}
		if _, updates := toolUpdates(ups); len(updates) == 0 || updates[len(updates)-1].Status == nil || *updates[len(updates)-1].Status != acp.ToolCallStatusFailed {
			t.Errorf("%s = %v: the call did not fail", tc.key, tc.val)
		}
	}

	// Without forms, an option that was not offered is the same failure.
	plain := newEnvScript(t, askScript, nil)
	sid = plain.newSession()
	plain.conn.Client.Permission = answer("7")
	plain.ask(sid, "choose")
	if text, want := acptest.Text(plain.conn.Client.Updates(sid)), `model read: the editor's answers do not fit the questions: question 1 ("Which db?") got option "7", which was not offered`; !strings.Contains(text, want) {
		t.Errorf("the model read %q, want %q", text, want)
	}
}

// TestAskUserHugeAnswers: a hostile editor answers a text question with
// megabytes, or a multi with the same option a million times. Neither
// reaches the model or the history: the call fails with one line. An
// answer over what any form of mm's may need (2 MiB) is not even decoded;
// a smaller one must still fit tools.MaxOutputBytes, a tool output's
// bound. The huge answers are 3 MiB, or MM_HUGE_PROMPT_MIB.
func TestAskUserHugeAnswers(t *testing.T) {
	e := newEnvScript(t, askScript, func(c *configs.Config) { c.Turns.Concurrency = 4 })
	if _, err := e.conn.InitForms(e.ctx); err != nil {
		t.Fatal(err)
	}
	sid, other := e.newSession(), e.newSession()
	size := 3 << 20 // over the 2 MiB read, and quick under -race
	if os.Getenv("MM_HUGE_PROMPT_MIB") != "" {
		size = hugePromptBytes()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	many := `["a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a",...`
	unread := fmt.Sprintf("the form's answer is too large to read: %.1f MiB, and mm reads at most 2.0 MiB", float64(size)/(1<<20))
	type answer struct {
		name    string
		content map[string]any
		want    string
	}
	cases := []answer{
		// Small enough to read, too large for the model.
		{"text", map[string]any{"q1": strings.Repeat("x", 300<<10)}, `question 1 ("Name?") got an answer of 300.0 KiB, more than the 256.0 KiB a tool's output may hold`},
		{"multi", map[string]any{"q1": "pg", "q2": manyOf("a", 1000), "q3": "x", "q4": true}, `question 2 ("Which tags?") is a multi, and its answer is ` + many + `, not a list of its options, each at most once`},
		// Too large to read at all.
		{"text", map[string]any{"q1": strings.Repeat("x", size)}, unread},
	}
	if os.Getenv("MM_HUGE_PROMPT_MIB") != "" {
		// Millions of items: for the figures only, too slow under -race.
		cases = append(cases, answer{"multi", map[string]any{"q1": "pg", "q2": manyOf("a", size/4), "q3": "x", "q4": true}, unread})
	}
	for _, tc := range cases {
		e.conn.Client.Reset()
		e.conn.Client.Elicit = func(acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
			return acp.UnstableCreateElicitationResponse{Accept: &acp.UnstableCreateElicitationAccept{Action: "accept", Content: tc.content}}, nil
		}
		prompt := map[string]string{"text": "name", "multi": "ask4"}[tc.name]
		var err error
		f := measureAttack(t, ctx, e.conn, other, func() { _, err = e.conn.Ask(ctx, sid, prompt) })
		t.Logf("a %s answer: %v", tc.name, f)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.HasPrefix(text, "model read: the editor's answers do not fit the questions: "+tc.want) || len(text) > 1000 {
			t.Errorf("%s: the model read %.300q…, want %q", tc.name, text, tc.want)
		}
	}
}

// manyOf is a list of n copies of s.
func manyOf(s string, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = s
	}
	return out
}
