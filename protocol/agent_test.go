package protocol_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/protocol"
)

func TestInitialize(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name    string
		version acp.ProtocolVersion
		elicit  bool
	}{
		{"v1", 1, false},
		{"newer client gets our latest", 7, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := acp.InitializeRequest{ProtocolVersion: tc.version, ClientInfo: &acp.Implementation{Name: "zed", Version: "0.999"}}
			if tc.elicit {
				req.ClientCapabilities.Elicitation = &acp.ElicitationCapabilities{Form: &acp.ElicitationFormCapabilities{}}
			}
			res, err := e.conn.Initialize(e.ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if res.ProtocolVersion != 1 {
				t.Errorf("protocolVersion = %d, want 1", res.ProtocolVersion)
			}
			if res.AgentInfo == nil || res.AgentInfo.Name != "bob" || res.AgentInfo.Title == nil || *res.AgentInfo.Title != "Bob (bash-first agent)" || res.AgentInfo.Version != protocol.Version {
				t.Errorf("agentInfo = %+v", res.AgentInfo)
			}
			if res.AgentCapabilities.LoadSession {
				t.Error("loadSession advertised without sessions.enabled")
			}
			want := "[acp] initialize: client zed 0.999, protocol " + map[bool]string{false: "1", true: "7"}[tc.elicit] + ", elicitation(form)=" + map[bool]string{false: "false", true: "true"}[tc.elicit]
			if !strings.Contains(e.conn.Stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, e.conn.Stderr.String())
			}
		})
	}
	// The raw response carries authMethods as an empty list, not absent.
	if !strings.Contains(e.conn.Stdout.String(), `"authMethods":[]`) {
		t.Errorf("authMethods not [] in %s", e.conn.Stdout.String())
	}
	if _, err := e.conn.Authenticate(e.ctx, acp.AuthenticateRequest{MethodId: "none"}); err != nil {
		t.Errorf("authenticate: %v", err)
	}
}

// TestLogout: logout, a method of ACP v1 the seed left out, is one entry
// of the method table (methods.go) and one handler: advertised in
// agentCapabilities.auth, it answers {} (mm has no login to end) and the
// connection goes on.
func TestLogout(t *testing.T) {
	e := newEnv(t, nil)
	res, err := e.conn.Initialize(e.ctx, acp.InitializeRequest{ProtocolVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.AgentCapabilities.Auth.Logout == nil {
		t.Errorf("logout not advertised: %+v", res.AgentCapabilities.Auth)
	}
	if _, err := e.conn.Logout(e.ctx, acp.LogoutRequest{}); err != nil {
		t.Fatalf("logout: %v", err)
	}
	if !strings.Contains(e.conn.Stdout.String(), `"result":{}`) {
		t.Errorf("logout's answer is not {}:\n%s", e.conn.Stdout.String())
	}
	if sid := e.newSession(); e.ask(sid, "ping").StopReason != acp.StopReasonEndTurn {
		t.Error("the connection did not go on after logout")
	}
}

func TestInitializeTitleOmittedWhenEmpty(t *testing.T) {
	e := newEnv(t, func(c *configs.Config) { c.ACP.Title = ""; c.ACP.Name = "robot" })
	res, err := e.conn.Init(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.AgentInfo.Name != "robot" || res.AgentInfo.Title != nil {
		t.Errorf("agentInfo = %+v", res.AgentInfo)
	}
}

func TestNewSession(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession()
	if !regexp.MustCompile(`^\d{8}-\d{6}-[0-9a-f]{8}$`).MatchString(string(sid)) {
		t.Errorf("session id %q is not date-sortable", sid)
	}
	ups := e.conn.Client.Updates(sid)
	if len(ups) != 1 || ups[0].AvailableCommandsUpdate == nil {
		t.Fatalf("updates = %v", ups)
	}
	cmds := ups[0].AvailableCommandsUpdate.AvailableCommands
	if len(cmds) != 2 || cmds[0].Name != "new" || cmds[0].Description != "Clear the history and start a new session" ||
		cmds[1].Name != "compact" || cmds[1].Description != "Compress the history now, keeping the last turns" || cmds[0].Input != nil {
		t.Errorf("commands = %+v", cmds)
	}
	// The notification follows the response on the wire.
	out := e.conn.Stdout.String()
	resp := strings.Index(out, `"sessionId":"`+string(sid)+`"}}`)
	note := strings.Index(out, `"available_commands_update"`)
	if resp < 0 || note < 0 || note < resp {
		t.Errorf("response at %d, available_commands_update at %d:\n%s", resp, note, out)
	}
}

func TestNewSessionCwd(t *testing.T) {
	e := newEnv(t, nil)
	file := e.cwd + "/file.txt"
	if err := writeFile(file, "x"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cwd  string
		ok   bool
		want string
	}{
		{"relative/dir", false, "not an absolute path"},
		{e.cwd + "/missing", false, "does not exist"},
		{file, false, "not a directory"},
		{`\\wsl.localhost\Ubuntu` + strings.ReplaceAll(e.cwd, "/", `\`), true, ""},
		{`//wsl$/Ubuntu` + e.cwd, true, ""},
	} {
		t.Run(tc.cwd, func(t *testing.T) {
			_, err := e.conn.NewSession(e.ctx, acp.NewSessionRequest{Cwd: tc.cwd, McpServers: []acp.McpServer{}})
			if tc.ok {
				if err != nil {
					t.Fatalf("translated cwd refused: %v", err)
				}
				return
			}
			var re *acp.RequestError
			if !errors.As(err, &re) || re.Code != -32602 {
				t.Fatalf("err = %v, want invalid params", err)
			}
			data, _ := json.Marshal(re.Data)
			if !strings.Contains(string(data), tc.want) || !strings.Contains(string(data), jsonQuote(tc.cwd)) {
				t.Errorf("error data %s does not name the cwd and %q", data, tc.want)
			}
		})
	}
}

func TestPromptStreamsAndCountsUsage(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession()
	res := e.ask(sid, "stream")
	if res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("stopReason = %s", res.StopReason)
	}
	ups := e.conn.Client.Updates(sid)
	chunks := 0
	for _, u := range ups {
		if u.AgentMessageChunk != nil {
			chunks++
		}
	}
	// Paced at 10 ms a word, the chunks arrive apart (mm folds only the
	// chunks of a session that queue up behind a busy writer).
	if got := acptest.Text(ups); got != "one two three four five" || chunks < 2 {
		t.Errorf("streamed %q in %d chunks", got, chunks)
	}
	if res.Usage == nil || res.Usage.InputTokens == 0 || res.Usage.OutputTokens == 0 || res.Usage.TotalTokens != res.Usage.InputTokens+res.Usage.OutputTokens {
		t.Fatalf("usage = %+v", res.Usage)
	}
	last := ups[len(ups)-1]
	if last.UsageUpdate == nil || last.UsageUpdate.Size != 16384 || last.UsageUpdate.Used == 0 {
		t.Errorf("last update = %s %+v, want usage_update with size 16384", acptest.Kind(last), last.UsageUpdate)
	}
	first := *res.Usage
	res = e.ask(sid, "ping")
	if res.Usage.InputTokens <= first.InputTokens || res.Usage.OutputTokens <= first.OutputTokens {
		t.Errorf("usage is not a session total: %+v then %+v", first, *res.Usage)
	}
	// The second request carries the whole conversation.
	msgs := e.requestMessages()
	if len(msgs) != 4 || msgs[0]["role"] != "system" || msgs[1]["content"] != "stream" ||
		msgs[2]["role"] != "assistant" || msgs[2]["content"] != "one two three four five" || msgs[3]["content"] != "ping" {
		t.Errorf("messages sent = %v", msgs)
	}
	if !strings.Contains(e.conn.Stderr.String(), "[acp] turn done: 0 command(s) · 0 file op(s) · 0 skill(s)") {
		t.Errorf("no turn-done line in %s", e.conn.Stderr.String())
	}
}

func TestReasoningAndMaxTokens(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession()
	e.ask(sid, "think")
	var thought string
	for _, u := range e.conn.Client.Updates(sid) {
		if u.AgentThoughtChunk != nil {
			thought += u.AgentThoughtChunk.Content.Text.Text
		}
	}
	if thought != "let me see" || acptest.Text(e.conn.Client.Updates(sid)) != "done" {
		t.Errorf("thought %q, text %q", thought, acptest.Text(e.conn.Client.Updates(sid)))
	}
	if res := e.ask(sid, "long"); res.StopReason != acp.StopReasonMaxTokens {
		t.Errorf("stopReason = %s, want max_tokens", res.StopReason)
	}
}

func TestAttachments(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession()
	if err := writeFile(e.cwd+"/main.go", "package main"); err != nil {
		t.Fatal(err)
	}
	_, err := e.conn.Prompt(e.ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{
		acp.TextBlock("look at @main.go and @. but not @missing.txt, again @main.go"),
		acp.ResourceLinkBlock("spec", "file:///tmp/spec.md"),
		acp.ImageBlock("aGk=", "image/png"), // not for this model: a note after the attachments
	}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := e.requestMessages()
	got := msgs[len(msgs)-1]["content"]
	want := "look at @main.go and @. but not @missing.txt, again @main.go\n[attached file: /tmp/spec.md]" +
		"\n[attached file: " + e.cwd + "/main.go]\n[attached directory: " + e.cwd + "]" +
		"\n[an image (image/png) was attached, but this model does not take images (model.vision is false): it was left out]"
	if got != want {
		t.Errorf("user message\n got %q\nwant %q", got, want)
	}
	if !strings.Contains(e.conn.Stderr.String(), "[acp] session "+string(sid)+": attached "+e.cwd+"/main.go") {
		t.Errorf("no attach log line:\n%s", e.conn.Stderr.String())
	}
}

func TestSlashNewAndCompact(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession()
	res := e.ask(sid, "/compact")
	if res.StopReason != acp.StopReasonEndTurn {
		t.Fatal(res.StopReason)
	}
	if got := acptest.Text(e.conn.Client.Updates(sid)); got != "🗜️ nothing to compact: 0 message(s), no turn older than the last 2" {
		t.Errorf("compact said %q", got)
	}
	e.ask(sid, "ping")
	e.ask(sid, "ping")
	before := e.server.Requests()
	e.conn.Client.Reset()
	res = e.ask(sid, "  /new \n")
	if res.StopReason != acp.StopReasonEndTurn || res.Usage == nil {
		t.Fatalf("/new answered %+v", res)
	}
	ups := e.conn.Client.Updates(sid)
	if got := acptest.Text(ups); got != "🆕 New session: 4 message(s) forgotten." {
		t.Errorf("/new said %q", got)
	}
	if ups[len(ups)-1].UsageUpdate == nil {
		t.Error("/new sent no usage_update")
	}
	if e.server.Requests() != before {
		t.Error("/new called the model")
	}
	if !strings.Contains(e.conn.Stderr.String(), "[acp] session "+string(sid)+": new session, 4 message(s) forgotten") {
		t.Error("no /new log line")
	}
	e.ask(sid, "ping")
	if msgs := e.requestMessages(); len(msgs) != 2 {
		t.Errorf("after /new the model got %d messages, want 2", len(msgs))
	}
}

func TestModelFailures(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession()
	e.ask(sid, "ping")
	for _, tc := range []struct{ prompt, want string }{
		{"fail", "the model is on fire"},
		{"garbage", "model server"},
	} {
		_, err := e.conn.Ask(e.ctx, sid, tc.prompt)
		var re *acp.RequestError
		if !errors.As(err, &re) || re.Code != -32603 {
			t.Fatalf("%s: err = %v, want internal error", tc.prompt, err)
		}
		msg, _ := re.Data.(map[string]any)["error"].(string)
		if !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q is not one line naming %q", tc.prompt, msg, tc.want)
		}
	}
	// The unanswered questions were dropped; the answered turn was kept.
	e.ask(sid, "ping")
	msgs := e.requestMessages()
	if len(msgs) != 4 || msgs[1]["content"] != "ping" || msgs[2]["content"] != "pong" || msgs[3]["content"] != "ping" {
		t.Errorf("history after failures = %v", msgs)
	}
}

func TestModelServerDown(t *testing.T) {
	e := newEnv(t, func(c *configs.Config) { c.Model.BaseURL = "http://127.0.0.1:1/v1" })
	sid := e.newSession()
	_, err := e.conn.Ask(e.ctx, sid, "ping")
	var re *acp.RequestError
	if !errors.As(err, &re) || re.Code != -32603 {
		t.Fatalf("err = %v, want internal error", err)
	}
	if msg, _ := re.Data.(map[string]any)["error"].(string); !strings.Contains(msg, "127.0.0.1:1") {
		t.Errorf("error %q does not say which server", msg)
	}
	// Editors show the message alone: it says why, in one line; the log
	// says it too.
	if !strings.HasPrefix(re.Message, "model server: ") || !strings.Contains(re.Message, "127.0.0.1:1") || strings.Contains(re.Message, "\n") {
		t.Errorf("message %q is not the one-line reason", re.Message)
	}
	if want := "[acp] session " + string(sid) + ": turn failed: model server: "; !strings.Contains(e.conn.Stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, e.conn.Stderr.String())
	}
}

// TestWaitingForAnotherSessionsTurn: a turn that waits more than a second
// for the serializer's slot tells its user why, once.
func TestWaitingForAnotherSessionsTurn(t *testing.T) {
	e := newEnv(t, nil) // turns.concurrency 1
	a, b := e.newSession(), e.newSession()
	resA := make(chan error, 1)
	go func() {
		_, err := e.conn.Ask(e.ctx, a, "slow")
		resA <- err
	}()
	waitFor(t, func() bool { return e.server.Requests() == 1 })
	resB := make(chan error, 1)
	go func() {
		_, err := e.conn.Ask(e.ctx, b, "ping")
		resB <- err
	}()
	want := "⏳ waiting for another session's turn (1 ahead)\n"
	if err := e.conn.Client.WaitUpdate(e.ctx, b, func(u acp.SessionUpdate) bool {
		return u.AgentThoughtChunk != nil && u.AgentThoughtChunk.Content.Text.Text == want
	}); err != nil {
		t.Fatalf("B was not told why it waits: %v", err)
	}
	_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: a})
	if err := <-resA; err != nil {
		t.Fatal(err)
	}
	if err := <-resB; err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, u := range e.conn.Client.Updates(b) {
		if u.AgentThoughtChunk != nil && strings.HasPrefix(u.AgentThoughtChunk.Content.Text.Text, "⏳") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("B was told %d times, want once", n)
	}
	if got := acptest.Text(e.conn.Client.Updates(b)); got != "pong" {
		t.Errorf("B's answer = %q", got)
	}
}

func TestUnknownSessionAndMethods(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.conn.Ask(e.ctx, "nope", "ping")
	var re *acp.RequestError
	if !errors.As(err, &re) || re.Code != -32002 || !strings.Contains(mustJSON(re.Data), `"sessionId":"nope"`) {
		t.Errorf("unknown session: %v", err)
	}
	if err := e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: "nope"}); err != nil {
		t.Errorf("cancel of an unknown session failed on the client side: %v", err)
	}
	for name, call := range map[string]func() error{
		"session/list": func() error {
			_, err := e.conn.ListSessions(e.ctx, acp.ListSessionsRequest{})
			return err
		},
		"session/load": func() error {
			_, err := e.conn.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: "x", Cwd: e.cwd, McpServers: []acp.McpServer{}})
			return err
		},
	} {
		var re *acp.RequestError
		if err := call(); !errors.As(err, &re) || re.Code != -32601 {
			t.Errorf("%s: %v, want method not found", name, err)
		}
	}
	if _, err := e.conn.SetSessionMode(e.ctx, acp.SetSessionModeRequest{SessionId: "x", ModeId: "ask"}); !errors.As(err, &re) || re.Code != -32002 {
		t.Errorf("set_mode on an unknown session: %v", err)
	}
	// The agent still serves.
	sid := e.newSession()
	if res := e.ask(sid, "ping"); res.StopReason != acp.StopReasonEndTurn {
		t.Error(res.StopReason)
	}
}

func TestCancelDuringStreaming(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession()
	e.ask(sid, "ping")
	done := make(chan acp.PromptResponse, 1)
	go func() {
		res, err := e.conn.Ask(e.ctx, sid, "sleep")
		if err != nil {
			t.Errorf("cancelled prompt answered an error: %v", err)
		}
		done <- res
	}()
	if err := e.conn.Client.WaitUpdate(e.ctx, sid, func(u acp.SessionUpdate) bool {
		return u.AgentMessageChunk != nil && strings.Contains(u.AgentMessageChunk.Content.Text.Text, "partial")
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res.StopReason != acp.StopReasonCancelled {
			t.Fatalf("stopReason = %s", res.StopReason)
		}
		t.Logf("cancel answered in %v", time.Since(start))
	case <-time.After(testwait.Hang):
		t.Fatal("cancel did not end the turn")
	}
	// The session goes on, with the partial answer in its history.
	if res := e.ask(sid, "ping"); res.StopReason != acp.StopReasonEndTurn {
		t.Fatal(res.StopReason)
	}
	msgs := e.requestMessages()
	if len(msgs) != 6 || msgs[3]["content"] != "sleep" || !strings.HasPrefix(msgs[4]["content"].(string), "partial") {
		t.Errorf("history after cancel = %v", msgs)
	}
	// An idle cancel does not poison the next prompt.
	if err := e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	if res := e.ask(sid, "ping"); res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("prompt after an idle cancel: %s", res.StopReason)
	}
}

func TestCancelBeforeAnyOutputDropsQuestion(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession()
	done := make(chan acp.StopReason, 1)
	go func() {
		res, _ := e.conn.Ask(e.ctx, sid, "slow")
		done <- res.StopReason
	}()
	waitFor(t, func() bool { return e.server.Requests() == 1 })
	_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid})
	if r := <-done; r != acp.StopReasonCancelled {
		t.Fatal(r)
	}
	e.ask(sid, "ping")
	if msgs := e.requestMessages(); len(msgs) != 2 {
		t.Errorf("the unanswered question stayed: %v", msgs)
	}
}

// TestTurnSerializer shows that turns.concurrency bounds the turns that reach
// the model at once, across sessions, and that a queued turn cancels at once.
func TestTurnSerializer(t *testing.T) {
	for _, slots := range []int{1, 2} {
		t.Run(map[int]string{1: "concurrency 1", 2: "concurrency 2"}[slots], func(t *testing.T) {
			e := newEnv(t, func(c *configs.Config) { c.Turns.Concurrency = slots })
			a, b := e.newSession(), e.newSession()
			resA := make(chan acp.StopReason, 1)
			go func() {
				res, _ := e.conn.Ask(e.ctx, a, "slow")
				resA <- res.StopReason
			}()
			waitFor(t, func() bool { return e.server.Requests() == 1 })
			resB := make(chan acp.StopReason, 1)
			go func() {
				res, _ := e.conn.Ask(e.ctx, b, "slow")
				resB <- res.StopReason
			}()
			if slots == 2 {
				waitFor(t, func() bool { return e.server.Requests() == 2 })
			} else {
				// B waits for A's slot: give it time to (wrongly) get through.
				time.Sleep(200 * time.Millisecond)
				if n := e.server.Requests(); n != 1 {
					t.Fatalf("%d requests reached the model with one slot", n)
				}
			}
			// Cancelling B answers at once, queued or running, while A goes on.
			_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: b})
			select {
			case r := <-resB:
				if r != acp.StopReasonCancelled {
					t.Fatalf("B: %s", r)
				}
			case <-time.After(testwait.Hang):
				t.Fatal("cancelled B did not answer")
			}
			select {
			case r := <-resA:
				t.Fatalf("A ended (%s) when B was cancelled", r)
			default:
			}
			_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: a})
			if r := <-resA; r != acp.StopReasonCancelled {
				t.Fatalf("A: %s", r)
			}
			// Slots were given back: both sessions still work.
			if e.ask(a, "ping").StopReason != acp.StopReasonEndTurn || e.ask(b, "ping").StopReason != acp.StopReasonEndTurn {
				t.Fatal("sessions unusable after cancels")
			}
		})
	}
}

func TestPromptsOfOneSessionQueue(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession()
	first := make(chan acp.StopReason, 1)
	go func() {
		res, _ := e.conn.Ask(e.ctx, sid, "slow")
		first <- res.StopReason
	}()
	waitFor(t, func() bool { return e.server.Requests() == 1 })
	second := make(chan acp.StopReason, 1)
	go func() {
		res, _ := e.conn.Ask(e.ctx, sid, "/compact")
		second <- res.StopReason
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case r := <-second:
		t.Fatalf("/compact answered (%s) while a turn ran", r)
	default:
	}
	_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid})
	if r := <-first; r != acp.StopReasonCancelled {
		t.Fatal(r)
	}
	// The cancel covered the queued /compact too: it arrived before the cancel.
	if r := <-second; r != acp.StopReasonCancelled {
		t.Errorf("queued /compact: %s", r)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached in %v", testwait.Hang)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

var _ = context.Background
