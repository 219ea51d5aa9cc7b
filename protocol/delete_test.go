package protocol_test

import (
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/store"
)

// TestDeleteSession: session/delete removes a stored session's file, and
// closes a live one first, a running turn included (its last save does not
// bring the file back); unknown and malformed ids are invalid params.
func TestDeleteSession(t *testing.T) {
	e := newSessEnv(t, sessionScript, nil)
	first := e.agent()
	stored := e.newSession(first)
	e.ask(first, stored, "bash")
	if _, err := first.CloseSession(e.ctx, acp.CloseSessionRequest{SessionId: stored}); err != nil {
		t.Fatal(err)
	}
	live := e.newSession(first)
	e.ask(first, live, "bash")
	path := func(sid acp.SessionId) string { return store.Path(e.cwd, e.cfg.Sessions.Dir, string(sid)) }

	// A second connection (a restarted mm) sees both in session/list.
	second := e.agent()
	if init, err := second.Init(e.ctx); err != nil || init.AgentCapabilities.SessionCapabilities.Delete == nil {
		t.Fatalf("sessionCapabilities.delete not advertised: %+v, %v", init.AgentCapabilities.SessionCapabilities, err)
	}
	list, err := second.ListSessions(e.ctx, acp.ListSessionsRequest{Cwd: acp.Ptr(e.cwd)})
	if err != nil || len(list.Sessions) != 2 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, err := second.UnstableDeleteSession(e.ctx, acp.UnstableDeleteSessionRequest{SessionId: stored}); err != nil {
		t.Fatal(err)
	}
	if fileExists(path(stored)) {
		t.Error("the stored session's file is still there")
	}

	// The live one, while a turn runs.
	done := make(chan acp.StopReason, 1)
	asked := e.server.Requests()
	go func() {
		res, _ := first.Ask(e.ctx, live, "slow")
		done <- res.StopReason
	}()
	waitFor(t, func() bool { return e.server.Requests() > asked })
	if _, err := first.UnstableDeleteSession(e.ctx, acp.UnstableDeleteSessionRequest{SessionId: live}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r != acp.StopReasonCancelled {
			t.Errorf("the running turn ended %s", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the running turn was not ended")
	}
	time.Sleep(50 * time.Millisecond) // a stray save would land by now
	if fileExists(path(live)) {
		t.Error("the live session's file is still there")
	}
	if _, err := first.Ask(e.ctx, live, "bash"); err == nil {
		t.Error("a deleted session still takes prompts")
	}
	if list, _ := first.ListSessions(e.ctx, acp.ListSessionsRequest{Cwd: acp.Ptr(e.cwd)}); len(list.Sessions) != 0 {
		t.Errorf("still listed: %+v", list.Sessions)
	}

	for _, id := range []acp.SessionId{stored, "../../etc/passwd"} {
		_, err := second.UnstableDeleteSession(e.ctx, acp.UnstableDeleteSessionRequest{SessionId: id})
		if re, ok := err.(*acp.RequestError); !ok || re.Code != -32602 {
			t.Errorf("delete %s: %v, want invalid params", id, err)
		}
	}
	if !strings.Contains(second.Stderr.String(), "[acp] session "+string(stored)+" deleted") {
		t.Errorf("no log line:\n%s", second.Stderr.String())
	}
}

// TestSessionInfoUpdate: after a turn, the client hears when the session
// was active and, the first time, its title.
func TestSessionInfoUpdate(t *testing.T) {
	e := newEnvScript(t, sessionScript, nil)
	sid := e.newSession()
	e.ask(sid, "echo")
	e.ask(sid, "bash")
	var infos []*acp.SessionSessionInfoUpdate
	for _, u := range e.conn.Client.Updates(sid) {
		if u.SessionInfoUpdate != nil {
			infos = append(infos, u.SessionInfoUpdate)
		}
	}
	if len(infos) != 2 {
		t.Fatalf("%d session_info_update(s), want one a turn", len(infos))
	}
	if infos[0].Title == nil || *infos[0].Title != "echo" || infos[1].Title != nil {
		t.Errorf("titles %v, %v: want echo, then none (unchanged)", infos[0].Title, infos[1].Title)
	}
	for _, in := range infos {
		at, err := time.Parse(time.RFC3339, *in.UpdatedAt)
		if err != nil || time.Since(at) > time.Minute || time.Since(at) < -time.Minute {
			t.Errorf("updatedAt %q: %v", *in.UpdatedAt, err)
		}
	}
}
