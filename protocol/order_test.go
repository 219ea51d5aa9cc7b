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
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/app"
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
