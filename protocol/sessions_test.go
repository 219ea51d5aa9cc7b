package protocol_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/llm/llmtest"
	"github.com/mm-agent/mm/store"
)

const sessionScript = `
rules:
  - match: "^Summarise the conversation"
    steps: [{text: "SUMMARY of the early turns"}]
  - match: "^echo$"
    steps:
      - {text: "Running it.", toolCalls: [{name: bash, args: {command: "echo hi"}}]}
      - {text: "model read: {{last_tool_output}}"}
  - match: "^grow$"
    steps:
      - {text: "Running it.", toolCalls: [{name: bash, args: {command: "seq 1000 1060"}}]}
      - {text: "model read: {{last_tool_output}}"}
  - match: "^slow$"
    steps: [{sleep: 1h}] # never answers: only a cancel ends its turn
  - match: "^bash$"
    steps:
      - toolCalls: [{name: bash, args: {command: "true"}}]
      - {text: "ran"}
usage: true
`

// sessEnv serves agents with persistence on, all against one model server
// and one project folder, so that a second agent plays a restarted mm.
type sessEnv struct {
	t      *testing.T
	server *llmtest.Server
	cfg    *configs.Config
	cwd    string
	ctx    context.Context
	// stateDir is the user's state directory of every agent started: a
	// restarted mm of the same user, with the same key.
	stateDir string
}

func newSessEnv(t *testing.T, script string, edit func(*configs.Config)) *sessEnv {
	t.Helper()
	srv, _ := scriptServer(t, script)
	cfg := configs.Default()
	cfg.Model.BaseURL = srv.URL()
	cfg.Model.ContextWindow = 100000
	cfg.Sessions.Enabled = true
	if edit != nil {
		edit(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	t.Cleanup(cancel)
	return &sessEnv{t: t, server: srv, cfg: cfg, cwd: t.TempDir(), ctx: ctx, stateDir: t.TempDir()}
}

// agent starts one more agent (a "process") on the environment.
func (e *sessEnv) agent() *acptest.Conn {
	e.t.Helper()
	model, err := llm.New(llm.Config{Provider: "openai", BaseURL: e.server.URL(), Temperature: -1})
	if err != nil {
		e.t.Fatal(err)
	}
	conn, err := acptest.InProcessWith(app.Options{Config: e.cfg, Model: model, StateDir: e.stateDir})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close(testwait.Hang) })
	init, err := conn.Init(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if init.AgentCapabilities.LoadSession != e.cfg.Sessions.Enabled {
		e.t.Errorf("loadSession = %v with sessions.enabled = %v", init.AgentCapabilities.LoadSession, e.cfg.Sessions.Enabled)
	}
	return conn
}

func (e *sessEnv) newSession(conn *acptest.Conn) acp.SessionId {
	e.t.Helper()
	res, err := conn.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := conn.Client.WaitUpdate(e.ctx, res.SessionId, func(u acp.SessionUpdate) bool { return u.AvailableCommandsUpdate != nil }); err != nil {
		e.t.Fatal(err)
	}
	return res.SessionId
}

func (e *sessEnv) ask(conn *acptest.Conn, sid acp.SessionId, text string) acp.PromptResponse {
	e.t.Helper()
	res, err := conn.Ask(e.ctx, sid, text)
	if err != nil {
		e.t.Fatalf("prompt %q: %v", text, err)
	}
	return res
}

func (e *sessEnv) file(sid acp.SessionId) *store.File {
	e.t.Helper()
	f, err := store.Load(store.Path(e.cwd, e.cfg.Sessions.Dir, string(sid)))
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

func provenance(t *testing.T, meta map[string]any) store.Provenance {
	t.Helper()
	b, _ := json.Marshal(meta["mm.sessionProvenance"])
	var p store.Provenance
	if err := json.Unmarshal(b, &p); err != nil || p.SessionID == "" {
		t.Fatalf("no provenance in %v", meta)
	}
	return p
}

func TestPersistAndLoad(t *testing.T) {
	e := newSessEnv(t, sessionScript, nil)
	first := e.agent()
	sid := e.newSession(first)
	// The file is written at session/new.
	waitFor(t, func() bool { return fileExists(store.Path(e.cwd, e.cfg.Sessions.Dir, string(sid))) })
	e.ask(first, sid, "echo")
	e.ask(first, sid, "bash")
	f := e.file(sid)
	if len(f.History) != 9 || f.Title != "echo" || f.Cwd != e.cwd || f.Provenance.Kind != "root" || !f.Usage.Reported {
		t.Fatalf("file = %+v (%d messages)", f, len(f.History))
	}
	live := first.Client.Updates(sid)

	// A second agent (a restarted mm) loads it.
	second := e.agent()
	res, err := second.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if p := provenance(t, res.Meta); p.SessionID != string(sid) || p.Kind != "root" {
		t.Errorf("provenance = %+v", p)
	}
	if res.Modes == nil || res.Modes.CurrentModeId != "yolo" {
		t.Errorf("modes = %+v", res.Modes)
	}
	ups := second.Client.Updates(sid)
	var kinds []string
	for _, u := range ups {
		kinds = append(kinds, acptest.Kind(u))
	}
	want := []string{"user_message_chunk", "agent_message_chunk", "tool_call", "agent_message_chunk",
		"user_message_chunk", "tool_call", "agent_message_chunk", "available_commands_update"}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Fatalf("replay = %v\nwant     %v", kinds, want)
	}
	if ups[0].UserMessageChunk.Content.Text.Text != "echo" || ups[1].AgentMessageChunk.Content.Text.Text != "Running it." {
		t.Errorf("replayed text: %+v %+v", ups[0].UserMessageChunk, ups[1].AgentMessageChunk)
	}
	// The replayed call is the live one, completed.
	var liveCall *acp.SessionUpdateToolCall
	var liveDone *acp.SessionToolCallUpdate
	for _, u := range live {
		if u.ToolCall != nil && liveCall == nil {
			liveCall = u.ToolCall
		}
		if u.ToolCallUpdate != nil && u.ToolCallUpdate.ToolCallId == liveCall.ToolCallId && *u.ToolCallUpdate.Status == acp.ToolCallStatusCompleted {
			liveDone = u.ToolCallUpdate
		}
	}
	rc := ups[2].ToolCall
	if rc.ToolCallId != liveCall.ToolCallId || rc.Title != "bash: echo hi" || rc.Kind != acp.ToolKindExecute || rc.Status != acp.ToolCallStatusCompleted ||
		mustJSON(rc.RawInput) != mustJSON(liveCall.RawInput) || mustJSON(rc.RawOutput) != mustJSON(liveDone.RawOutput) ||
		rc.Content[0].Content.Content.Text.Text != liveDone.RawOutput.(map[string]any)["output"] {
		t.Errorf("replayed call = %+v\nlive %+v / %+v", rc, liveCall, liveDone)
	}
	if !strings.Contains(second.Stderr.String(), "[acp] session "+string(sid)+" loaded from .mm/sessions: 8 message(s) replayed") {
		t.Errorf("no load log line:\n%s", second.Stderr.String())
	}
	// The loaded session goes on from where it was.
	e.ask(second, sid, "bash")
	if msgs := e.server.LastRequest()["messages"].([]any); len(msgs) != 12 {
		t.Errorf("the loaded session sent %d messages, want 12", len(msgs))
	}
}

func TestLoadErrors(t *testing.T) {
	e := newSessEnv(t, sessionScript, nil)
	conn := e.agent()
	good := e.newSession(conn)
	e.ask(conn, good, "bash")
	dir := filepath.Join(e.cwd, e.cfg.Sessions.Dir)
	corrupt := "20260101-000000-deadbeef"
	data, _ := os.ReadFile(filepath.Join(dir, string(good)+".json"))
	if err := os.WriteFile(filepath.Join(dir, corrupt+".json"), data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"20990101-000000-00000000", corrupt, "../../etc/passwd"} {
		_, err := conn.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: acp.SessionId(id), Cwd: e.cwd, McpServers: []acp.McpServer{}})
		var re *acp.RequestError
		want := -32602 // a file that is not a session, an id that is not one
		if id == "20990101-000000-00000000" {
			want = -32002 // no such session: ACP's resource_not_found
		}
		if !errors.As(err, &re) || re.Code != want {
			t.Fatalf("%s: %v, want code %d", id, err, want)
		}
		d := re.Data.(map[string]any)
		if d["sessionId"] != id || d["error"] == "" || strings.Contains(d["error"].(string), "\n") {
			t.Errorf("%s: error data %v", id, d)
		}
	}
	// The other session is unaffected.
	if res := e.ask(conn, good, "bash"); res.StopReason != acp.StopReasonEndTurn {
		t.Error(res.StopReason)
	}
}

func TestSlashNewKeepsTheConversation(t *testing.T) {
	e := newSessEnv(t, sessionScript, nil)
	conn := e.agent()
	sid := e.newSession(conn)
	res := e.ask(conn, sid, "/new")
	if strings.Contains(conn.Stderr.String(), "previous conversation kept as") {
		t.Error("an empty conversation was kept")
	}
	e.ask(conn, sid, "bash")
	res = e.ask(conn, sid, "/new")
	logs := conn.Stderr.String()
	i := strings.Index(logs, "previous conversation kept as ")
	if i < 0 {
		t.Fatalf("no kept line:\n%s", logs)
	}
	kept := strings.Fields(logs[i+len("previous conversation kept as "):])[0]
	p := provenance(t, res.Meta)
	if p.SessionID != string(sid) || p.ParentSessionID != kept || p.Kind != "continuation" {
		t.Errorf("provenance after /new = %+v", p)
	}
	old := e.file(acp.SessionId(kept))
	if len(old.History) != 5 || old.History[1].Content != "bash" {
		t.Errorf("kept conversation = %+v", old.History)
	}
	if f := e.file(sid); len(f.History) != 1 || f.Provenance.ParentSessionID != kept {
		t.Errorf("session file after /new = %+v", f)
	}
}

func TestCompact(t *testing.T) {
	for _, persist := range []bool{true, false} {
		t.Run(map[bool]string{true: "persisted", false: "in memory"}[persist], func(t *testing.T) {
			e := newSessEnv(t, sessionScript, func(c *configs.Config) { c.Sessions.Enabled = persist; c.Context.KeepLastTurns = 1 })
			conn := e.agent()
			sid := e.newSession(conn)
			e.ask(conn, sid, "bash")
			conn.Client.Reset()
			e.ask(conn, sid, "/compact")
			if got := acptest.Text(conn.Client.Updates(sid)); got != "🗜️ nothing to compact: 4 message(s), no turn older than the last 1" {
				t.Errorf("compact said %q", got)
			}
			e.ask(conn, sid, "echo")
			conn.Client.Reset()
			res := e.ask(conn, sid, "/compact")
			got := acptest.Text(conn.Client.Updates(sid))
			if !strings.HasPrefix(got, "🗜️ compressed 4 messages → 1 summary + 4 kept (") || !strings.HasSuffix(got, "s)") {
				t.Errorf("compact said %q", got)
			}
			if p := provenance(t, res.Meta); p.CompressionDepth != 1 {
				t.Errorf("provenance after /compact = %+v", p)
			}
			e.ask(conn, sid, "bash")
			msgs := e.server.LastRequest()["messages"].([]any)
			// The summary reaches the model framed as context handed over.
			if len(msgs) != 9 || msgs[1].(map[string]any)["content"] != history.SummaryFrame+"SUMMARY of the early turns" || msgs[2].(map[string]any)["content"] != "echo" {
				t.Errorf("history after /compact: %v", msgs)
			}
			if persist {
				f := e.file(sid)
				if !f.History[1].Summary || f.Provenance.CompressionDepth != 1 {
					t.Errorf("file after /compact: %+v", f.History[1])
				}
				// A reload replays the summary with its marker.
				second := e.agent()
				if _, err := second.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
					t.Fatal(err)
				}
				if u := second.Client.Updates(sid)[0]; u.AgentMessageChunk == nil || u.AgentMessageChunk.Content.Text.Text != "🗜️ SUMMARY of the early turns" {
					t.Errorf("first replayed update = %+v", u)
				}
			}
		})
	}
}

func TestCompactFailureKeepsHistory(t *testing.T) {
	script := strings.Replace(sessionScript, `steps: [{text: "SUMMARY of the early turns"}]`, `steps: [{error: "summariser down"}]`, 1)
	e := newSessEnv(t, script, func(c *configs.Config) { c.Context.KeepLastTurns = 1 })
	conn := e.agent()
	sid := e.newSession(conn)
	e.ask(conn, sid, "bash")
	e.ask(conn, sid, "bash")
	conn.Client.Reset()
	e.ask(conn, sid, "/compact")
	if got := acptest.Text(conn.Client.Updates(sid)); !strings.HasPrefix(got, "[compact: failed, history kept: ") || !strings.Contains(got, "summariser down") {
		t.Errorf("compact said %q", got)
	}
	if f := e.file(sid); len(f.History) != 9 {
		t.Errorf("history changed: %d messages", len(f.History))
	}
}

func TestAutoCompaction(t *testing.T) {
	e := newSessEnv(t, sessionScript, func(c *configs.Config) {
		// Tokens: the tool definitions offered (about 3,000), the system
		// prompt (about 600, the compact one and the environment) and a
		// few turns fill it.
		c.Model.ContextWindow = 5600
		c.Context.Threshold = 0.85
		c.Context.KeepLastTurns = 1
	})
	conn := e.agent()
	sid := e.newSession(conn)
	// Enough turns to fill the window whatever the exact size of what the
	// model reads besides them (which changes with the prompt and tools).
	for i := 0; i < 16 && !strings.Contains(conn.Stderr.String(), "auto-compact"); i++ {
		e.ask(conn, sid, "grow")
	}
	if !strings.Contains(acptest.Text(conn.Client.Updates(sid)), "🗜️ compressed ") || !strings.Contains(conn.Stderr.String(), "auto-compact — 🗜️ compressed") {
		t.Fatalf("no automatic compression:\n%s", conn.Stderr.String())
	}
	f := e.file(sid)
	if !f.History[1].Summary {
		t.Errorf("history does not start with a summary: %+v", f.History[1])
	}
}

func TestListResumeCloseFork(t *testing.T) {
	e := newSessEnv(t, sessionScript, nil)
	conn := e.agent()
	a := e.newSession(conn)
	e.ask(conn, a, "echo")
	time.Sleep(1100 * time.Millisecond) // updatedAt has second precision
	b := e.newSession(conn)
	e.ask(conn, b, "bash")

	list, err := conn.ListSessions(e.ctx, acp.ListSessionsRequest{Cwd: &e.cwd})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != 2 || list.Sessions[0].SessionId != b || list.Sessions[1].SessionId != a ||
		*list.Sessions[0].Title != "bash" || *list.Sessions[1].Title != "echo" {
		t.Errorf("list = %+v", list.Sessions)
	}

	// Fork: a new id, the same history, provenance pointing at the parent.
	fork, err := conn.UnstableForkSession(e.ctx, acp.UnstableForkSessionRequest{SessionId: a, Cwd: e.cwd})
	if err != nil {
		t.Fatal(err)
	}
	if fork.SessionId == a {
		t.Fatal("fork kept the id")
	}
	if p := provenance(t, fork.Meta); p.ParentSessionID != string(a) || p.Kind != "fork" || p.SessionID != string(fork.SessionId) {
		t.Errorf("fork provenance = %+v", p)
	}
	e.ask(conn, fork.SessionId, "bash")
	if msgs := e.server.LastRequest()["messages"].([]any); len(msgs) != 8 || msgs[1].(map[string]any)["content"] != "echo" {
		t.Errorf("fork history: %v", msgs)
	}
	if f := e.file(fork.SessionId); f.Provenance.ParentSessionID != string(a) {
		t.Errorf("fork file provenance = %+v", f.Provenance)
	}

	// Close frees the session; prompts to it fail; resume brings it back.
	if _, err := conn.CloseSession(e.ctx, acp.CloseSessionRequest{SessionId: a}); err != nil {
		t.Fatal(err)
	}
	var re *acp.RequestError
	if _, err := conn.Ask(e.ctx, a, "bash"); !errors.As(err, &re) || re.Code != -32002 {
		t.Errorf("prompt after close: %v", err)
	}
	res, err := conn.ResumeSession(e.ctx, acp.ResumeSessionRequest{SessionId: a, Cwd: e.cwd})
	if err != nil {
		t.Fatal(err)
	}
	if provenance(t, res.Meta).SessionID != string(a) {
		t.Error("resume provenance")
	}
	conn.Client.Reset()
	e.ask(conn, a, "bash")
	if msgs := e.server.LastRequest()["messages"].([]any); len(msgs) != 8 {
		t.Errorf("resumed history: %d messages", len(msgs))
	}
	for _, u := range conn.Client.Updates(a) {
		if u.UserMessageChunk != nil {
			t.Error("resume replayed the history")
		}
	}
}

func TestCloseCancelsRunningTurn(t *testing.T) {
	e := newSessEnv(t, sessionScript, nil)
	conn := e.agent()
	sid := e.newSession(conn)
	done := make(chan acp.StopReason, 1)
	go func() {
		res, _ := conn.Ask(e.ctx, sid, "slow")
		done <- res.StopReason
	}()
	waitFor(t, func() bool { return e.server.Requests() == 1 })
	if _, err := conn.CloseSession(e.ctx, acp.CloseSessionRequest{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r != acp.StopReasonCancelled {
		t.Errorf("turn of a closed session: %s", r)
	}
}

func TestLoadReattachesToRunningTurn(t *testing.T) {
	e := newSessEnv(t, sessionScript, nil)
	conn := e.agent()
	sid := e.newSession(conn)
	e.ask(conn, sid, "bash")
	done := make(chan acp.StopReason, 1)
	go func() {
		res, _ := conn.Ask(e.ctx, sid, "slow")
		done <- res.StopReason
	}()
	waitFor(t, func() bool { return e.server.Requests() == 3 })
	conn.Client.Reset()
	if _, err := conn.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	ups := conn.Client.Updates(sid)
	if len(ups) == 0 || ups[0].UserMessageChunk == nil || ups[len(ups)-1].AvailableCommandsUpdate == nil {
		t.Errorf("replay of the live session: %v", ups)
	}
	select {
	case r := <-done:
		t.Fatalf("loading ended the running turn (%s)", r)
	default:
	}
	_ = conn.Cancel(e.ctx, acp.CancelNotification{SessionId: sid})
	if r := <-done; r != acp.StopReasonCancelled {
		t.Errorf("cancel after re-attach: %s", r)
	}
}

func TestModesAndModelSelector(t *testing.T) {
	e := newSessEnv(t, sessionScript, nil)
	otherSrv, _ := scriptServer(t, "rules:\n  - match: \"^bash$\"\n    steps: [{text: \"from the other model\"}]\n")
	e.cfg.Models = []configs.NamedModel{{ID: "other", Model: configs.Model{Provider: "openai", BaseURL: otherSrv.URL(), Name: "other-model"}}}
	conn := e.agentWithModels()
	res, err := conn.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	sid := res.SessionId
	if res.Modes.CurrentModeId != "yolo" || len(res.Modes.AvailableModes) != 2 || len(res.ConfigOptions) != 1 {
		t.Fatalf("new session: modes %+v, options %+v", res.Modes, res.ConfigOptions)
	}
	sel := res.ConfigOptions[0].Select
	if sel.Id != "model" || sel.CurrentValue != "default" || len(*sel.Options.Ungrouped) != 2 {
		t.Errorf("model selector = %+v", sel)
	}

	// Ask mode: bash asks.
	if _, err := conn.SetSessionMode(e.ctx, acp.SetSessionModeRequest{SessionId: sid, ModeId: "ask"}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Client.WaitUpdate(e.ctx, sid, func(u acp.SessionUpdate) bool {
		return u.CurrentModeUpdate != nil && u.CurrentModeUpdate.CurrentModeId == "ask"
	}); err != nil {
		t.Fatal(err)
	}
	e.ask(conn, sid, "bash")
	if n := len(conn.Client.Permissions()); n != 1 {
		t.Errorf("ask mode: %d permission requests", n)
	}
	if e.file(sid).Mode != "ask" {
		t.Error("mode not persisted")
	}
	if _, err := conn.SetSessionMode(e.ctx, acp.SetSessionModeRequest{SessionId: sid, ModeId: "yolo"}); err != nil {
		t.Fatal(err)
	}
	e.ask(conn, sid, "bash")
	if n := len(conn.Client.Permissions()); n != 1 {
		t.Errorf("yolo mode asked again (%d)", n)
	}
	var re *acp.RequestError
	if _, err := conn.SetSessionMode(e.ctx, acp.SetSessionModeRequest{SessionId: sid, ModeId: "reckless"}); !errors.As(err, &re) || re.Code != -32602 {
		t.Errorf("unknown mode: %v", err)
	}

	// The model selector switches the model of this session only.
	opts, err := conn.SetSessionConfigOption(e.ctx, acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{SessionId: sid, ConfigId: "model", Value: "other"}})
	if err != nil {
		t.Fatal(err)
	}
	if opts.ConfigOptions[0].Select.CurrentValue != "other" {
		t.Errorf("options after set = %+v", opts.ConfigOptions[0].Select)
	}
	conn.Client.Reset()
	e.ask(conn, sid, "bash")
	if got := acptest.Text(conn.Client.Updates(sid)); got != "from the other model" {
		t.Errorf("after switching: %q", got)
	}
	if _, err := conn.SetSessionConfigOption(e.ctx, acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{SessionId: sid, ConfigId: "model", Value: "nope"}}); !errors.As(err, &re) || re.Code != -32602 {
		t.Errorf("unknown model: %v", err)
	}
}

// agentWithModels starts an agent with the config's extra models built.
func (e *sessEnv) agentWithModels() *acptest.Conn {
	e.t.Helper()
	model, err := llm.New(llm.Config{Provider: "openai", BaseURL: e.server.URL(), Temperature: -1})
	if err != nil {
		e.t.Fatal(err)
	}
	var models []actors.NamedModel
	for _, m := range e.cfg.Models {
		lm, err := llm.New(llm.Config{Provider: m.Provider, BaseURL: m.BaseURL, Name: m.Name, Temperature: -1})
		if err != nil {
			e.t.Fatal(err)
		}
		models = append(models, actors.NamedModel{ID: m.ID, Name: m.Name, Model: lm})
	}
	conn, err := acptest.InProcessWith(app.Options{Config: e.cfg, Model: model, Models: models, StateDir: e.stateDir})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close(testwait.Hang) })
	if _, err := conn.Init(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	return conn
}

// TestCompactionUpdates: a client that announces session.compaction gets
// /compact as compaction_update updates — in_progress, then completed with
// the model's summary — and not the seed's "🗜️ compressed …" text; a
// failed one ends failed, with its error.
func TestCompactionUpdates(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "completed", true: "failed"}[fail], func(t *testing.T) {
			script := sessionScript
			if fail {
				script = strings.Replace(script, `steps: [{text: "SUMMARY of the early turns"}]`, `steps: [{error: "summariser down"}]`, 1)
			}
			r, _ := newRawAgentWith(t, script, func(c *configs.Config) { c.Context.KeepLastTurns = 1; c.Yolo = true })
			r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"session":{"compaction":{}}}}}`)
			r.response(1)
			r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, t.TempDir()))
			sid := r.response(2)["result"].(map[string]any)["sessionId"].(string)
			prompt := func(id int, text string) (updates []map[string]any) {
				r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":%q}]}}`, id, sid, text))
				for m := range r.lines {
					if got, ok := m["id"].(float64); ok && int(got) == id {
						return updates
					}
					if u, ok := m["params"].(map[string]any)["update"].(map[string]any); ok {
						updates = append(updates, u)
					}
				}
				return updates
			}
			prompt(3, "echo")
			prompt(4, "echo")
			var statuses []string
			var summary, failure, text string
			for _, u := range prompt(5, "/compact") {
				switch u["sessionUpdate"] {
				case "compaction_update":
					statuses = append(statuses, fmt.Sprint(u["status"]))
					if s, ok := u["summary"].([]any); ok {
						summary = fmt.Sprint(s[0].(map[string]any)["text"])
					}
					if e, ok := u["error"].(string); ok {
						failure = e
					}
					if u["compactionId"] == "" {
						t.Errorf("a compaction update without its id: %v", u)
					}
				case "agent_message_chunk":
					text += fmt.Sprint(u["content"].(map[string]any)["text"])
				}
			}
			want := []string{"in_progress", "completed"}
			if fail {
				want = []string{"in_progress", "failed"}
			}
			if strings.Join(statuses, ",") != strings.Join(want, ",") {
				t.Errorf("compaction statuses %v, want %v", statuses, want)
			}
			if !fail && summary != "SUMMARY of the early turns" {
				t.Errorf("the summary: %q", summary)
			}
			if fail && !strings.Contains(failure, "summariser down") {
				t.Errorf("the error: %q", failure)
			}
			if text != "" {
				t.Errorf("the seed's text went too: %q", text)
			}
		})
	}
}
