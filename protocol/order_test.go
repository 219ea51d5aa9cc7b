package protocol_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/store"
)

// The tests of this file write a session's requests together, as a fast
// client does, and check that each takes effect in the order written,
// whichever code serves it: the session's mailbox is the order.

func setModelLine(id int, sid, model string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/set_config_option","params":{"sessionId":%q,"configId":"model","value":%q}}`, id, sid, model)
}

func setModeLine(id int, sid, mode string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/set_mode","params":{"sessionId":%q,"modeId":%q}}`, id, sid, mode)
}

// result is a response's result, failing the test on an error.
func result(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	res, ok := m["result"].(map[string]any)
	if !ok {
		t.Fatalf("not a result: %v", m)
	}
	return res
}

// TestModelThenPromptInOrder: a prompt written right after the model
// selector runs on the model selected, every time.
func TestModelThenPromptInOrder(t *testing.T) {
	_, other := scriptServer(t, "rules:\n  - match: \"^which$\"\n    steps: [{text: \"other\"}]\n")
	r, _ := newRawAgentOpts(t, "rules:\n  - match: \"^which$\"\n    steps: [{text: \"default\"}]\n", nil, func(o *app.Options) {
		o.Models = []actors.NamedModel{{ID: "other", Name: "other", Model: other}}
	})
	sid := r.initSession(t.TempDir())
	for i := 0; i < 40; i++ {
		want := []string{"other", "default"}[i%2]
		id := 100 + 2*i
		r.send(setModelLine(id, sid, want), promptLine(id+1, sid, "which"))
		chunks, res := r.untilResponses(float64(id), float64(id+1))
		result(t, res[float64(id)])
		result(t, res[float64(id+1)])
		if got := strings.Join(chunks, ""); got != want {
			t.Fatalf("try %d: the prompt ran on %q, want %q", i, got, want)
		}
	}
}

// TestModeThenPromptInOrder: a prompt written right after set_mode runs in
// the mode set: in ask mode its command asks, in yolo mode it does not.
func TestModeThenPromptInOrder(t *testing.T) {
	r, _ := newRawAgentWith(t, "rules:\n  - match: \"^bash$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: \"true\"}}]\n      - {text: \"ran\"}\n", nil)
	sid := r.initSession(t.TempDir())
	for i := 0; i < 20; i++ {
		mode := []string{"ask", "yolo"}[i%2]
		id := 100 + 2*i
		r.send(setModeLine(id, sid, mode), promptLine(id+1, sid, "bash"))
		asked := r.untilAnswered(float64(id + 1))
		if want := mode == "ask"; asked != want {
			t.Fatalf("try %d, mode %s: asked permission %v", i, mode, asked)
		}
	}
}

// update reads until a session/update of the kind comes.
func (r *rawAgent) update(kind string) {
	r.t.Helper()
	timeout := time.After(testwait.Hang)
	for {
		select {
		case m, ok := <-r.lines:
			if !ok {
				r.t.Fatal("the agent closed its output")
			}
			if p, ok := m["params"].(map[string]any); ok && m["method"] == "session/update" {
				if u, ok := p["update"].(map[string]any); ok && u["sessionUpdate"] == kind {
					return
				}
			}
		case <-timeout:
			r.t.Fatalf("no %s", kind)
		}
	}
}

// untilAnswered reads until the response with id, allowing every
// permission request meanwhile; it reports whether one was asked.
func (r *rawAgent) untilAnswered(id float64) (asked bool) {
	r.t.Helper()
	timeout := time.After(testwait.Hang)
	for {
		select {
		case m, ok := <-r.lines:
			if !ok {
				r.t.Fatal("the agent closed its output")
			}
			if m["method"] == "session/request_permission" {
				asked = true
				id, _ := json.Marshal(m["id"])
				r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}`, id))
				continue
			}
			if got, ok := m["id"].(float64); ok && got == id {
				result(r.t, m)
				return asked
			}
		case <-timeout:
			r.t.Fatalf("no response %v", id)
		}
	}
}

// TestCloseThenLoadAndDelete: session/close answers once the session's
// file is final, and a load or a delete written right after it sees it so:
// the load finds the mode set before the close, the delete is not undone.
func TestCloseThenLoadAndDelete(t *testing.T) {
	cwd := t.TempDir()
	r, _ := newRawAgentWith(t, script, func(c *configs.Config) { c.Sessions.Enabled = true })
	sid := r.initSession(cwd)
	path := store.Path(cwd, ".mm/sessions", sid)
	next := 10
	id := func() int { next++; return next }
	for i := 0; i < 5; i++ {
		// set_mode, close and load written together.
		mode, closeID, loadID := id(), id(), id()
		r.send(setModeLine(mode, sid, "ask"),
			fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/close","params":{"sessionId":%q}}`, closeID, sid),
			fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/load","params":{"sessionId":%q,"cwd":%q,"mcpServers":[]}}`, loadID, sid, cwd))
		_, res := r.untilResponses(float64(mode), float64(closeID), float64(loadID))
		result(t, res[float64(closeID)])
		modes := result(t, res[float64(loadID)])["modes"].(map[string]any)
		if modes["currentModeId"] != "ask" {
			t.Fatalf("try %d: loaded right after close in mode %v, want ask", i, modes["currentModeId"])
		}
		// Back to yolo, then close alone: once answered, the file holds it.
		mode, closeID = id(), id()
		r.send(setModeLine(mode, sid, "yolo"), fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/close","params":{"sessionId":%q}}`, closeID, sid))
		r.untilResponses(float64(mode), float64(closeID))
		f, err := store.Load(path)
		if err != nil || f.Mode != "yolo" {
			t.Fatalf("try %d: after close answered, the file has mode %v (%v), want yolo", i, f, err)
		}
		loadID = id()
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/load","params":{"sessionId":%q,"cwd":%q,"mcpServers":[]}}`, loadID, sid, cwd))
		r.untilResponses(float64(loadID))
	}
	// close and delete written together: the delete is final.
	closeID, deleteID := id(), id()
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/close","params":{"sessionId":%q}}`, closeID, sid),
		fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/delete","params":{"sessionId":%q}}`, deleteID, sid))
	_, res := r.untilResponses(float64(closeID), float64(deleteID))
	result(t, res[float64(closeID)])
	result(t, res[float64(deleteID)])
	time.Sleep(100 * time.Millisecond) // a late save would be back by now
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the deleted session's file came back: %v", err)
	}
}

// TestRequestFloodIsBounded: 20,000 requests while the client reads
// nothing: mm reads a bounded number of them (the pipe pushes back on the
// rest), so its goroutines and heap stay flat; once the client reads
// again, every request is answered once, in order.
func TestRequestFloodIsBounded(t *testing.T) {
	testwait.Short(t, "20,000 requests while the client reads nothing")
	r, _ := newRawAgent(t)
	sid := r.initSession(t.TempDir())
	r.update("available_commands_update") // the session's start-up is over
	goroutines, heap := runtime.NumGoroutine(), heapNow()
	const n = 20000
	lines := make([]string, n)
	for i := range lines {
		lines[i] = setModeLine(1000+i, sid, []string{"ask", "yolo"}[i%2])
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, _ = r.in.Write([]byte(strings.Join(lines, "\n") + "\n"))
	}()
	// The client reads nothing: wait until mm stops reading too (its
	// goroutine count stops moving).
	last, still := 0, 0
	for still < 10 {
		time.Sleep(50 * time.Millisecond)
		if g := runtime.NumGoroutine(); g == last {
			still++
		} else {
			last, still = g, 0
		}
	}
	grewG, grewH := runtime.NumGoroutine()-goroutines, heapNow()-heap
	t.Logf("with stdout unread: goroutines %d → %d, heap +%d KiB", goroutines, goroutines+grewG, grewH>>10)
	select {
	case <-written:
		t.Error("mm read all 20,000 requests while their answers went unread")
	default:
	}
	if grewG > 64 {
		t.Errorf("goroutines grew by %d while the client read nothing", grewG)
	}
	if grewH > 8<<20 {
		t.Errorf("the heap grew by %d bytes while the client read nothing", grewH)
	}
	// Reading again: every request answered once, in order.
	want := 1000.0
	timeout := time.After(testwait.Hang)
	for want < 1000+n {
		select {
		case m := <-r.lines:
			id, ok := m["id"].(float64)
			if !ok {
				continue
			}
			if id != want {
				t.Fatalf("response %v, want %v next", id, want)
			}
			result(t, m)
			want++
		case <-timeout:
			t.Fatalf("only %v of %d answered", want-1000, n)
		}
	}
	<-written
}

// TestNullIDRequests: a request with a null id is refused with -32600 and
// a null id (the SDK would take it for a notification and answer nothing);
// a burst of them never closes the connection.
func TestNullIDRequests(t *testing.T) {
	r, _ := newRawAgent(t)
	r.initSession(t.TempDir())
	r.send(`{"jsonrpc":"2.0","id":null,"method":"session/list","params":{}}`)
	m := r.errorResponse()
	if m["id"] != nil || m["error"].(map[string]any)["code"] != -32600.0 {
		t.Fatalf("null id: %v", m)
	}
	const n = 5000
	burst := make([]string, n)
	for i := range burst {
		burst[i] = `{"jsonrpc":"2.0","id":null,"method":"session/set_mode","params":{"sessionId":"x","modeId":"ask"}}`
	}
	go r.send(append(burst, `{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":1}}`)...)
	refused := 0
	timeout := time.After(testwait.Hang)
	for {
		select {
		case m, ok := <-r.lines:
			if !ok {
				t.Fatalf("mm closed its output after %d null-id requests", refused)
			}
			if m["id"] == 9.0 {
				if refused != n {
					t.Errorf("%d null-id requests refused, want %d", refused, n)
				}
				result(t, m)
				return
			}
			if e, ok := m["error"].(map[string]any); ok && e["code"] == -32600.0 && m["id"] == nil {
				refused++
			}
		case <-timeout:
			t.Fatalf("no answer to the request after the burst (%d refused)", refused)
		}
	}
}

// TestCancelRequestIDsCompareByValue: $/cancel_request naming 7 cancels
// the prompt sent with id 7.0, as the SDK compares ids.
func TestCancelRequestIDsCompareByValue(t *testing.T) {
	r, _ := newRawAgent(t)
	sid := r.initSession(t.TempDir())
	r.send(strings.Replace(promptLine(7, sid, "slow"), `"id":7`, `"id":7.0`, 1),
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":7}}`)
	if res := result(t, r.response(7)); res["stopReason"] != "cancelled" {
		t.Fatalf("prompt 7.0 after $/cancel_request 7: %v", res)
	}
}

// TestOverlongLineKeepsItsID: a line over acp.maxLineBytes whose id comes
// first is answered with that id, so its request does not wait forever.
func TestOverlongLineKeepsItsID(t *testing.T) {
	r, _ := newRawAgentWith(t, script, func(c *configs.Config) { c.ACP.MaxLineBytes = 1 << 10 })
	sid := r.initSession(t.TempDir())
	r.send(strings.Replace(promptLine(777, sid, strings.Repeat("a", 4000)), `"id":777,"method":"session/prompt"`, `"id":777,"method":"session/prompt"`, 1))
	m := r.errorResponse()
	if m["id"] != 777.0 || !strings.Contains(fmt.Sprint(m["error"]), "acp.maxLineBytes") {
		t.Fatalf("the overlong request got %v", m)
	}
	// The id may come after the method too; a line whose id is past its
	// first bytes gets null.
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/prompt","id":"x-1","params":{"sessionId":%q,"prompt":[{"type":"text","text":%q}]}}`, sid, strings.Repeat("b", 4000)))
	if m := r.errorResponse(); m["id"] != "x-1" {
		t.Fatalf("the overlong request with its id after the method got %v", m)
	}
}

// TestDuplicateKeysRefused: a message with a member twice is refused with
// -32600, not read as whichever came last.
func TestDuplicateKeysRefused(t *testing.T) {
	cwd := t.TempDir()
	r, _ := newRawAgentWith(t, script, func(c *configs.Config) { c.Sessions.Enabled = true })
	sid := r.initSession(cwd)
	path := store.Path(cwd, ".mm/sessions", sid)
	for i, line := range []string{
		fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":"session/list","method":"session/delete","params":{"sessionId":%q}}`, sid),
		fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":"session/delete","params":{"sessionId":"20260101-000000-00000000","sessionId":%q}}`, sid),
	} {
		r.send(line)
		m := r.response(5)
		e, ok := m["error"].(map[string]any)
		if !ok || e["code"] != -32600.0 {
			t.Fatalf("message %d: %v, want -32600", i, m)
		}
	}
	r.send(promptLine(6, sid, "ping"))
	result(t, r.response(6))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the session's file is gone: %v", err)
	}
}

// TestDeleteOfNoSessionSucceeds: session/delete of a session that does not
// exist, or no longer does, succeeds silently, as ACP says.
func TestDeleteOfNoSessionSucceeds(t *testing.T) {
	cwd := t.TempDir()
	r, _ := newRawAgentWith(t, script, func(c *configs.Config) { c.Sessions.Enabled = true })
	sid := r.initSession(cwd)
	for i, id := range []string{sid, sid, "20260101-000000-00000000"} {
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/delete","params":{"sessionId":%q}}`, 10+i, id))
		result(t, r.response(float64(10+i)))
	}
	if _, err := os.Stat(filepath.Join(cwd, ".mm", "sessions", sid+".json")); !os.IsNotExist(err) {
		t.Fatalf("the file is still there: %v", err)
	}
}

func sessionLine(id int, method, sid, cwd string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"sessionId":%q,"cwd":%q,"mcpServers":[]}}`, id, method, sid, cwd)
}

// storedSession is a raw agent that saves sessions, with one session of
// one ping turn closed (stored, not live), its id and its folder.
func storedSession(t *testing.T) (*rawAgent, string, string) {
	t.Helper()
	cwd := t.TempDir()
	r, _ := newRawAgentWith(t, script, func(c *configs.Config) { c.Sessions.Enabled = true })
	sid := r.initSession(cwd)
	r.send(promptLine(10, sid, "ping"))
	r.untilResponses(10)
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":11,"method":"session/close","params":{"sessionId":%q}}`, sid))
	r.untilResponses(11)
	return r, sid, cwd
}

// TestOpeningHoldsWhatFollows: a load of a stored session, a prompt and a
// mode written together are served in that order: the session opens (its
// actor reads its file) before the prompt runs in it. (A close written with
// them would cancel the prompt: a close cancels the turns sent before it.)
func TestOpeningHoldsWhatFollows(t *testing.T) {
	r, sid, cwd := storedSession(t)
	next := 20
	for i := range 5 {
		load, prompt, mode, closeID := next, next+1, next+2, next+3
		next += 4
		r.send(sessionLine(load, "session/load", sid, cwd), promptLine(prompt, sid, "ping"), setModeLine(mode, sid, "ask"))
		order, res := r.inOrder(float64(load), float64(prompt), float64(mode))
		result(t, res[float64(load)])
		if stop := result(t, res[float64(prompt)])["stopReason"]; stop != "end_turn" {
			t.Fatalf("try %d: the prompt after the load ended %v", i, stop)
		}
		result(t, res[float64(mode)])
		if order[0] != float64(load) {
			t.Fatalf("try %d: answered in the order %v, want the load first", i, order)
		}
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/close","params":{"sessionId":%q}}`, closeID, sid))
		result(t, r.response(float64(closeID)))
		f, err := store.Load(store.Path(cwd, ".mm/sessions", sid))
		if err != nil || f.Mode != "ask" {
			t.Fatalf("try %d: after the close the file is %v (%v), want mode ask", i, f, err)
		}
		if users := countRole(f, "user"); users != i+2 {
			t.Fatalf("try %d: the file holds %d prompts, want %d", i, users, i+2)
		}
	}
}

func countRole(f *store.File, role string) int {
	n := 0
	for _, m := range f.History {
		if string(m.Role) == role {
			n++
		}
	}
	return n
}

// TestFailedOpenAnswersWhatFollows: a load of a session that is not
// stored, and requests of it written right behind it, are answered in that
// order: the load says why it failed, the others that the session does
// not exist; the connection serves on.
func TestFailedOpenAnswersWhatFollows(t *testing.T) {
	cwd := t.TempDir()
	r, _ := newRawAgentWith(t, script, func(c *configs.Config) { c.Sessions.Enabled = true })
	r.initSession(cwd)
	missing := actors.NewSessionID(time.Now())
	r.send(sessionLine(10, "session/load", missing, cwd), promptLine(11, missing, "ping"), setModeLine(12, missing, "ask"),
		sessionLine(13, "session/resume", missing, cwd))
	order, res := r.inOrder(10, 11, 12, 13)
	if order[0] != 10 {
		t.Errorf("answered in the order %v, want the load first", order)
	}
	for _, id := range []float64{10, 11, 12, 13} {
		e, ok := res[id]["error"].(map[string]any)
		if !ok || e["code"] != float64(-32002) {
			t.Fatalf("request %v of a session that is not stored: %v", id, res[id])
		}
	}
	for _, id := range []float64{11, 12} {
		if b, _ := json.Marshal(res[id]["error"]); !strings.Contains(string(b), "unknown session") {
			t.Errorf("request %v: %s, want unknown session", id, b)
		}
	}
	sid := ""
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":14,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, cwd))
	sid = result(t, r.response(14))["sessionId"].(string)
	r.send(promptLine(15, sid, "ping"))
	if stop := result(t, r.response(15))["stopReason"]; stop != "end_turn" {
		t.Fatalf("a prompt after the failed load ended %v", stop)
	}
}

// TestForkOfStoredThenDelete: a fork of a stored session and its delete
// written together: the fork reads the file before the delete removes it.
func TestForkOfStoredThenDelete(t *testing.T) {
	cwd := t.TempDir()
	r, _ := newRawAgentWith(t, script, func(c *configs.Config) { c.Sessions.Enabled = true })
	r.initSession(cwd)
	next := 10
	for i := range 3 {
		n := next
		next += 10
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, n, cwd))
		parent := result(t, r.response(float64(n)))["sessionId"].(string)
		r.send(promptLine(n+1, parent, "ping"))
		r.untilResponses(float64(n + 1))
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/close","params":{"sessionId":%q}}`, n+2, parent))
		r.untilResponses(float64(n + 2))
		r.send(sessionLine(n+3, "session/fork", parent, cwd), fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/delete","params":{"sessionId":%q}}`, n+4, parent))
		_, res := r.inOrder(float64(n+3), float64(n+4))
		child := result(t, res[float64(n+3)])["sessionId"].(string)
		result(t, res[float64(n+4)])
		f, err := store.Load(store.Path(cwd, ".mm/sessions", child))
		if err != nil || countRole(f, "user") != 1 {
			t.Fatalf("try %d: the fork's file %v (%v), want the parent's prompt in it", i, f, err)
		}
		if _, err := os.Stat(store.Path(cwd, ".mm/sessions", parent)); !os.IsNotExist(err) {
			t.Fatalf("try %d: the deleted parent's file is there: %v", i, err)
		}
	}
}

// TestLoadThenCloseTogether: a load of a stored session and its close
// written together: the load is served (the session opens, replays and
// answers), then the close, which leaves the file as the load found it.
func TestLoadThenCloseTogether(t *testing.T) {
	r, sid, cwd := storedSession(t)
	next := 20
	for i := range 5 {
		load, closeID := next, next+1
		next += 2
		r.send(sessionLine(load, "session/load", sid, cwd), fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/close","params":{"sessionId":%q}}`, closeID, sid))
		chunks, order, res := r.readResponses([]float64{float64(load), float64(closeID)})
		result(t, res[float64(load)])
		result(t, res[float64(closeID)])
		if order[0] != float64(load) || !strings.HasPrefix(strings.Join(chunks, ""), "pong") {
			t.Fatalf("try %d: answered in the order %v, replayed %q; want the load first, having replayed pong", i, order, chunks)
		}
	}
}

// TestLegacySetModel: JetBrains AIR's session/set_model, {sessionId,
// modelId}, sets the model config option, answers {}, and the next prompt
// runs on the model set, in order; an unknown model or a missing modelId
// is invalid params. One method table entry and one handler (acpmethod,
// serveSetModel).
func TestLegacySetModel(t *testing.T) {
	_, other := scriptServer(t, "rules:\n  - match: \"^which$\"\n    steps: [{text: \"other\"}]\n")
	r, _ := newRawAgentOpts(t, "rules:\n  - match: \"^which$\"\n    steps: [{text: \"default\"}]\n", nil, func(o *app.Options) {
		o.Models = []actors.NamedModel{{ID: "other", Name: "other", Model: other}}
	})
	sid := r.initSession(t.TempDir())
	set := func(id int, model string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/set_model","params":{"sessionId":%q,"modelId":%q}}`, id, sid, model)
	}
	r.send(set(100, "other"), promptLine(101, sid, "which"))
	chunks, res := r.untilResponses(100, 101)
	if got := result(t, res[100]); len(got) != 0 {
		t.Errorf("set_model answered %v, want {}", got)
	}
	if got := strings.Join(chunks, ""); got != "other" {
		t.Errorf("the prompt after set_model ran on %q", got)
	}
	r.send(set(102, "nope"), fmt.Sprintf(`{"jsonrpc":"2.0","id":103,"method":"session/set_model","params":{"sessionId":%q}}`, sid))
	_, res = r.untilResponses(102, 103)
	for _, id := range []float64{102, 103} {
		e, _ := res[id]["error"].(map[string]any)
		if e["code"] != float64(-32602) {
			t.Errorf("response %v: %v, want invalid params", id, res[id])
		}
	}
}

// TestForkOfStoredAtEOF: a fork of a session closed just before it, and
// then the end of the input: the fork waits for the close's file, and is
// a creation all along, so the connection's end waits for it and it is
// answered with its session, not refused as mm shuts down.
func TestForkOfStoredAtEOF(t *testing.T) {
	cwd := t.TempDir()
	r, _ := newRawAgentWith(t, script, func(c *configs.Config) { c.Sessions.Enabled = true })
	parent := r.initSession(cwd)
	r.send(promptLine(10, parent, "ping"))
	r.untilResponses(10)
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":11,"method":"session/close","params":{"sessionId":%q}}`, parent),
		sessionLine(12, "session/fork", parent, cwd))
	_ = r.in.Close()
	_, res := r.untilResponses(11, 12)
	result(t, res[11])
	if child, _ := result(t, res[12])["sessionId"].(string); child == "" {
		t.Fatalf("the fork at the input's end: %v", res[12])
	}
}
