package connect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Reopening a connection the server could not resume. A drop longer than
// the server keeps its frames (409: more than serve.resumeWindowBytes
// were written meanwhile), or a server that restarted (404), leaves the
// server's side of the connection unreachable. The editor's sessions are
// not lost — they live on the server, their history stored — only what
// was on its way. So mm connect opens a new connection, sends the
// editor's initialize again, and resumes each session the editor had
// open (session/resume: no replay), and answers the editor's requests
// still in flight with an error that says what happened; then the bridge
// goes on, the editor's agent process alive and its sessions usable. The
// answers to mm connect's own requests are not written on stdout; what
// else the server writes meanwhile (a session's commands) is.
//
// To know the editor's sessions, mm connect notes the requests that open
// one (session/new, fork, load, resume) and the answers that say they
// did, and those that close one (close, delete).

// maxSessions bounds the sessions noted; past it, the others are not
// resumed on a reopen (their next request says they are unknown).
const maxSessions = 1024

// maxCapture bounds the answer to an opening request read to find its
// session id: a session/new answer is a few KiB.
const maxCapture = 1 << 20

// opened is a session the editor opened on this connection: what
// session/resume needs to take it again.
type opened struct {
	cwd     json.RawMessage
	servers json.RawMessage
	dirs    json.RawMessage
}

// opening is a request that opens or closes a session, awaiting its
// answer.
type opening struct {
	method string
	sid    string // load, resume, close, delete: the session named
	at     opened
}

// noteRequest notes a request of the editor's that opens or closes a
// session. Called with mu held.
func (b *bridge) noteRequest(key, method string, line []byte) {
	switch method {
	case "session/new", "session/fork", "session/load", "session/resume", "session/close", "session/delete":
	default:
		return
	}
	p := gjson.GetManyBytes(line, "params.sessionId", "params.cwd", "params.mcpServers", "params.additionalDirectories")
	o := opening{method: method, sid: p[0].String(), at: opened{cwd: raw(p[1]), servers: raw(p[2]), dirs: raw(p[3])}}
	if b.opening == nil {
		b.opening = map[string]opening{}
	}
	b.opening[key] = o
}

func raw(r gjson.Result) json.RawMessage {
	if !r.Exists() {
		return nil
	}
	return json.RawMessage(r.Raw)
}

// capturing says whether the next frame may be the answer to an opening
// request, which is then read whole (up to maxCapture).
func (b *bridge) capturing() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.opening) > 0
}

// noteAnswer notes the answer frame (captured whole, or nil) to the
// request of key: a session the editor now has, or no longer has.
func (b *bridge) noteAnswer(key string, frame []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.opening[key]
	if !ok {
		return
	}
	delete(b.opening, key)
	res := gjson.GetBytes(frame, "result")
	if !res.Exists() {
		return // refused, or too large to read: nothing changed that mm connect knows of
	}
	switch o.method {
	case "session/close", "session/delete":
		delete(b.sessions, o.sid)
		return
	case "session/new", "session/fork":
		o.sid = res.Get("sessionId").String()
	}
	if o.sid == "" || len(b.sessions) >= maxSessions {
		return
	}
	if b.sessions == nil {
		b.sessions = map[string]opened{}
	}
	if o.method == "session/fork" {
		o.at.servers, o.at.dirs = nil, nil
	}
	b.sessions[o.sid] = o.at
}

// reopen opens a new connection in place of the one the server could not
// resume (why), resumes the editor's sessions on it, and answers the
// requests in flight: the socket to go on with, and its epoch. Called
// with resumeMu and sendMu held.
func (b *bridge) reopen(why error) (*websocket.Conn, uint64, error) {
	b.mu.Lock()
	init := b.init
	b.mu.Unlock()
	if init == nil {
		return b.giveUp(why) // nothing was opened yet
	}
	ws, resp, err := dial(b.ctx, b.o, nil)
	if err != nil {
		return b.giveUp(fmt.Errorf("%v; and a new connection failed: %s", why, dialFailure(b.o.URL, b.o.Token, resp, err)))
	}
	// A frame the drop cut off on stdout will not be finished: its line
	// ends here, broken, before anything else is written.
	if err := b.out.endLine(); err != nil {
		_ = ws.CloseNow()
		return nil, 0, err
	}
	r := &reopening{b: b, ws: ws}
	initLine, _ := sjson.SetBytes(init, "id", "mm-connect-reopen")
	if _, err := r.call(initLine, "mm-connect-reopen"); err != nil {
		_ = ws.CloseNow()
		return b.giveUp(fmt.Errorf("%v; and a new connection's initialize failed: %v", why, err))
	}
	sent := newSentFrames(sentWindow)
	sent.on = true
	b.mu.Lock()
	sessions := maps.Clone(b.sessions)
	b.mu.Unlock()
	resumed, n := 0, 0
	for sid, at := range sessions {
		n++
		params := map[string]any{"sessionId": sid, "cwd": at.cwd, "mcpServers": at.servers}
		if at.servers == nil {
			params["mcpServers"] = json.RawMessage("[]")
		}
		if at.dirs != nil {
			params["additionalDirectories"] = at.dirs
		}
		id := "mm-connect-resume-" + strconv.Itoa(n)
		line, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "session/resume", "params": params})
		sent.add(line, false)
		answer, err := r.call(line, id)
		if err != nil {
			_ = ws.CloseNow()
			return b.giveUp(fmt.Errorf("%v; and a new connection failed while resuming the sessions: %v", why, err))
		}
		if msg := gjson.GetBytes(answer, "error.message"); msg.Exists() {
			fmt.Fprintf(b.stderr, "mm connect: session %s could not be resumed on the new connection: %s\n", sid, msg.String())
			b.mu.Lock()
			delete(b.sessions, sid)
			b.mu.Unlock()
			continue
		}
		resumed++
	}
	lost := b.failInFlight()
	b.mu.Lock()
	b.ws = ws
	b.epoch++
	e := b.epoch
	b.reopened = e
	b.recvd = r.read
	b.id = resp.Header.Get("Acp-Connection-Id")
	b.mu.Unlock()
	b.sent = sent
	fmt.Fprintf(b.stderr, "mm connect: %v; opened a new connection, resumed %d session(s), and answered %d request(s) in flight with an error (their answers were lost)\n",
		why, resumed, lost)
	return ws, e, nil
}

// errLost is what the editor's requests in flight when the connection
// was reopened get.
const errLost = "mm connect: the connection to mm serve dropped for longer than the server keeps what it writes, so the answer to this request was lost; mm connect opened a new connection and resumed the sessions: what the request did is in the session's history (load the session to see it)"

// failInFlight answers every request of the editor's written on the lost
// connection and not answered with errLost, and forgets them; it returns
// how many. Those not written yet go on the new connection.
func (b *bridge) failInFlight() int {
	b.mu.Lock()
	var ids []json.RawMessage
	for key, r := range b.asked {
		if !r.written {
			continue // not written yet: it goes on the new connection
		}
		ids = append(ids, r.id)
		delete(b.asked, key)
		delete(b.opening, key)
	}
	b.mu.Unlock()
	for _, id := range ids {
		line, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32603, "message": errLost}})
		_ = b.out.line(append(line, '\n'))
	}
	b.checkDrained()
	return len(ids)
}

// reopening reads a new connection's frames while mm connect asks its
// own requests: their answers are kept from the editor, anything else is
// written on stdout.
type reopening struct {
	b    *bridge
	ws   *websocket.Conn
	read uint64 // frames read whole: the new connection's cursor
}

// call sends line and reads frames until the answer whose id is id.
func (r *reopening) call(line []byte, id string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(r.b.ctx, connectDialTimeout)
	defer cancel()
	if err := r.ws.Write(ctx, websocket.MessageText, line); err != nil {
		return nil, err
	}
	for {
		typ, rd, err := r.ws.Reader(ctx)
		if err != nil {
			return nil, err
		}
		frame, err := io.ReadAll(io.LimitReader(rd, int64(r.b.max)+1))
		if err != nil {
			return nil, err
		}
		if len(frame) > r.b.max {
			return nil, errors.New("a frame over acp.maxLineBytes")
		}
		r.read++
		if typ != websocket.MessageText {
			continue
		}
		if gjson.GetBytes(frame, "id").String() == id && !gjson.GetBytes(frame, "method").Exists() {
			return frame, nil
		}
		frame = bytes.ReplaceAll(bytes.ReplaceAll(frame, []byte("\n"), []byte(" ")), []byte("\r"), []byte(" "))
		if err := r.b.out.line(append(frame, '\n')); err != nil {
			return nil, err
		}
	}
}

// cannotResume says whether the server's answer to a resume means the
// connection is gone from it (404) or its frames are (409): a reopen may
// still bring the sessions back.
func cannotResume(resp *http.Response) bool {
	return resp != nil && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusConflict)
}

// reopenedAt says whether the socket of epoch is a new connection's.
func (b *bridge) reopenedAt(epoch uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reopened == epoch
}
