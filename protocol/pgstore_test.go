package protocol_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
)

// pgAgent starts one more agent on e, a "machine" of its own: its own
// state directory (so its own signing key), the same database.
func (e *sessEnv) pgAgent() *acptest.Conn {
	e.t.Helper()
	e.stateDir = e.t.TempDir()
	return e.agent()
}

// sessionIDs lists the ids of a session/list answer.
func sessionIDs(t *testing.T, conn *acptest.Conn, e *sessEnv, cwd *string) []string {
	t.Helper()
	res, err := conn.ListSessions(e.ctx, acp.ListSessionsRequest{Cwd: cwd})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range res.Sessions {
		out = append(out, string(s.SessionId))
	}
	return out
}

// TestPostgresSharedByTwoAgents: two mm (two hubs, each with its own key)
// share one Postgres. A session made and prompted on the first is listed
// by the second, with or without a cwd, and loaded there with its
// history, trusted; a turn there works. The first, now a stale copy,
// checks the store before its next turn, reads the session again and runs
// the turn on the stored history; the second does the same after it, and
// a load through the first replays the store's copy. A third mm, which
// knows no folder, deletes it.
func TestPostgresSharedByTwoAgents(t *testing.T) {
	testwait.Short(t, "a PostgreSQL server started for two agents")
	url := pg.URL(t)
	e := newSessEnv(t, sessionScript, func(c *configs.Config) { c.Store.URL = url })
	first := e.pgAgent()
	sid := e.newSession(first)
	e.ask(first, sid, "echo")
	e.ask(first, sid, "bash")
	if !strings.Contains(first.Stderr.String(), "sessions are kept in postgres") {
		t.Errorf("no start line for the store:\n%s", first.Stderr.String())
	}

	second := e.pgAgent()
	if got := sessionIDs(t, second, e, nil); !slices.Contains(got, string(sid)) {
		t.Fatalf("session/list without a cwd on the second mm = %v, want %s", got, sid)
	}
	list, err := second.ListSessions(e.ctx, acp.ListSessionsRequest{Cwd: acp.Ptr(e.cwd)})
	if err != nil || len(list.Sessions) != 1 || list.Sessions[0].SessionId != sid || list.Sessions[0].Cwd != e.cwd ||
		list.Sessions[0].Title == nil || *list.Sessions[0].Title != "echo" {
		t.Fatalf("session/list of the cwd = %+v, %v", list, err)
	}
	if _, err := second.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, u := range second.Client.Updates(sid) {
		kinds = append(kinds, acptest.Kind(u))
	}
	want := []string{"user_message_chunk", "agent_message_chunk", "tool_call", "agent_message_chunk",
		"user_message_chunk", "tool_call", "agent_message_chunk", "available_commands_update"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("replay on the second mm = %v\nwant %v", kinds, want)
	}
	if text := acptest.Text(second.Client.Updates(sid)); strings.Contains(text, "not signed") {
		t.Errorf("the session from the database was not trusted: %q", text)
	}
	e.ask(second, sid, "bash")
	if msgs := e.server.LastRequest()["messages"].([]any); len(msgs) != 12 {
		t.Errorf("the loaded session sent %d messages, want 12: its history", len(msgs))
	}

	// The first mm still holds its copy, which is stale now. Before its
	// turn it checks the store, finds the second's save, reads the session
	// again and goes on from there: the turn has the second's turns (16
	// messages, as a load would give), and the log says so.
	e.ask(first, sid, "bash")
	if msgs := e.server.LastRequest()["messages"].([]any); len(msgs) != 16 {
		t.Errorf("the stale copy's turn sent %d messages, want 16: the stored history", len(msgs))
	}
	if !strings.Contains(first.Stderr.String(), "session "+string(sid)+": another mm saved it since this copy did") ||
		!strings.Contains(first.Stderr.String(), "read again from session "+string(sid)+" in postgres") {
		t.Errorf("the stale copy's log does not say it read the session again:\n%s", first.Stderr.String())
	}
	// The second is the stale copy then, and does the same.
	e.ask(second, sid, "bash")
	if msgs := e.server.LastRequest()["messages"].([]any); len(msgs) != 20 {
		t.Errorf("the second copy's next turn sent %d messages, want 20", len(msgs))
	}
	// A load through the first replays the store's copy, the second's
	// last turn included, never its own older one.
	before := len(first.Client.Updates(sid))
	if _, err := first.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	var users int
	for _, u := range first.Client.Updates(sid)[before:] {
		if acptest.Kind(u) == "user_message_chunk" {
			users++
		}
	}
	if users != 5 {
		t.Errorf("the first's replay has %d user messages, want the 5 turns the store holds", users)
	}

	// A fork of the stored session, then a delete by an mm that knows no
	// folder: Postgres finds sessions by id.
	third := e.pgAgent()
	fork, err := third.UnstableForkSession(e.ctx, acp.UnstableForkSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.UnstableMcpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	fourth := e.pgAgent()
	if _, err := fourth.UnstableDeleteSession(e.ctx, acp.UnstableDeleteSessionRequest{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	if got := sessionIDs(t, fourth, e, nil); slices.Contains(got, string(sid)) || !slices.Contains(got, string(fork.SessionId)) {
		t.Errorf("after the delete, session/list = %v: want the fork %s and not %s", got, fork.SessionId, sid)
	}
	if !strings.Contains(fourth.Stderr.String(), "session "+string(sid)+" deleted (session "+string(sid)+" in postgres)") {
		t.Errorf("no delete line:\n%s", fourth.Stderr.String())
	}
}

// TestPostgresNewKeepsTheConversation: /new keeps the old conversation as
// a session of its own in the database, which another mm lists and loads;
// the session itself goes on, saved at its next revision.
func TestPostgresNewKeepsTheConversation(t *testing.T) {
	testwait.Short(t, "a PostgreSQL server started")
	url := pg.URL(t)
	e := newSessEnv(t, sessionScript, func(c *configs.Config) { c.Store.URL = url })
	conn := e.pgAgent()
	sid := e.newSession(conn)
	e.ask(conn, sid, "bash")
	e.ask(conn, sid, "/new")
	logs := conn.Stderr.String()
	i := strings.Index(logs, "previous conversation kept as ")
	if i < 0 {
		t.Fatalf("no kept line:\n%s", logs)
	}
	kept := strings.Fields(logs[i+len("previous conversation kept as "):])[0]
	e.ask(conn, sid, "bash")

	other := e.pgAgent()
	if got := sessionIDs(t, other, e, acp.Ptr(e.cwd)); !slices.Contains(got, kept) || !slices.Contains(got, string(sid)) {
		t.Fatalf("session/list = %v, want %s and %s", got, sid, kept)
	}
	if _, err := other.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: acp.SessionId(kept), Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	ups := other.Client.Updates(acp.SessionId(kept))
	if len(ups) == 0 || ups[0].UserMessageChunk == nil || ups[0].UserMessageChunk.Content.Text.Text != "bash" {
		t.Errorf("the kept conversation replays %v", ups)
	}
	if strings.Contains(logs, "saving") {
		t.Errorf("a save failed:\n%s", logs)
	}
}
