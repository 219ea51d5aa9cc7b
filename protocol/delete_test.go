package protocol_test

import (
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/testwait"
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
	case <-time.After(testwait.Hang):
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

	// A session deleted already is deleted: ACP's session/delete
	// succeeds, silently; an id that cannot be a session's is refused.
	for _, id := range []acp.SessionId{stored, "20260101-000000-00000000"} {
		if _, err := second.UnstableDeleteSession(e.ctx, acp.UnstableDeleteSessionRequest{SessionId: id}); err != nil {
			t.Errorf("delete %s again: %v, want success", id, err)
		}
	}
	_, err = second.UnstableDeleteSession(e.ctx, acp.UnstableDeleteSessionRequest{SessionId: "../../etc/passwd"})
	if re, ok := err.(*acp.RequestError); !ok || re.Code != -32602 {
		t.Errorf("delete ../../etc/passwd: %v, want invalid params", err)
	}
	if !strings.Contains(second.Stderr.String(), "[acp] session "+string(stored)+" deleted") {
		t.Errorf("no log line:\n%s", second.Stderr.String())
	}
}

// TestSessionInfoUpdate: after a turn, the client hears when the session
// was active (to the second: a turn in the same second as the last one
// told, with the same title, says nothing) and, the first time, its title.
func TestSessionInfoUpdate(t *testing.T) {
	e := newEnvScript(t, sessionScript, nil)
	sid := e.newSession()
	e.ask(sid, "echo")
	e.ask(sid, "bash") // most likely within the same second: nothing new
	second := time.Now().Truncate(time.Second)
	time.Sleep(time.Until(second.Add(time.Second + 10*time.Millisecond)))
	e.ask(sid, "bash")
	var infos []*acp.SessionSessionInfoUpdate
	for _, u := range e.conn.Client.Updates(sid) {
		if u.SessionInfoUpdate != nil {
			infos = append(infos, u.SessionInfoUpdate)
		}
	}
	// Two, or three if the first two turns straddled a second.
	if len(infos) != 2 && len(infos) != 3 {
		t.Fatalf("%d session_info_update(s) for 3 turns over 2 seconds", len(infos))
	}
	var last time.Time
	for i, in := range infos {
		if (i == 0) != (in.Title != nil) || (i == 0 && *in.Title != "echo") {
			t.Errorf("update %d has title %v: want echo first, then none (unchanged)", i, in.Title)
		}
		at, err := time.Parse(time.RFC3339, *in.UpdatedAt)
		if err != nil || !at.After(last) || time.Since(at) > time.Minute {
			t.Errorf("updatedAt %q after %v: %v", *in.UpdatedAt, last, err)
		}
		last = at
	}
}
