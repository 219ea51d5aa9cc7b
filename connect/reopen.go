package connect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/jsonrpc"
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
// goes on, the editor's agent process alive and its sessions usable.
// mm connect's own requests are calls of the server's connection, their
// answers kept from the editor; what else the server writes meanwhile (a
// session's commands) goes to stdout. The server's requests of the lost
// connection are forgotten: the editor's answers to them go nowhere.
//
// To know the editor's sessions, mm connect notes the requests that open
// one (session/new, fork, load, resume) and the answers that say they
// did, and those that close one (close, delete).

// maxSessions bounds the sessions noted; past it, the others are not
// resumed on a reopen (their next request says they are unknown).
const maxSessions = 1024

// opened is a session the editor opened on this connection: what
// session/resume needs to take it again.
type opened struct {
	cwd     json.RawMessage
	servers json.RawMessage
	dirs    json.RawMessage
}

// openingOf is what a request that opens a session says of it.
func openingOf(params json.RawMessage) *opened {
	var p struct {
		Cwd                   json.RawMessage `json:"cwd"`
		McpServers            json.RawMessage `json:"mcpServers"`
		AdditionalDirectories json.RawMessage `json:"additionalDirectories"`
	}
	_ = json.Unmarshal(params, &p) // what is not there is not resumed with
	return &opened{cwd: p.Cwd, servers: p.McpServers, dirs: p.AdditionalDirectories}
}

// noteAnswer notes the server's answer (its result, nil for an error) to
// the editor's request in: a session the editor now has, or no longer
// has.
func (b *bridge) noteAnswer(in jsonrpc.Incoming, result json.RawMessage) {
	req, _ := in.Tag.(*request)
	if req == nil || result == nil {
		return // refused: nothing changed that mm connect knows of
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	sid := in.Session
	m, _ := acpmethod.Lookup(in.Method)
	switch {
	case m.Closes:
		delete(b.sessions, sid)
		return
	case m.Creates:
		sid = jsonrpc.SessionOf(result)
	}
	at := req.opens
	if at == nil || sid == "" || len(b.sessions) >= maxSessions {
		return
	}
	if b.sessions == nil {
		b.sessions = map[string]opened{}
	}
	o := *at
	if in.Method == acp.AgentMethodSessionFork {
		o.servers, o.dirs = nil, nil
	}
	b.sessions[sid] = o
}

// reopen opens a new connection in place of the one the server could not
// resume (why), resumes the editor's sessions on it, and answers the
// requests in flight; or gives up. The server's reader reads the new
// socket from the start (the answers to mm connect's calls come through
// it); the editor's messages wait until the sessions are resumed.
func (b *bridge) reopen(why error) {
	b.mu.Lock()
	init := b.init
	b.mu.Unlock()
	if init == nil {
		b.giveUp(why) // nothing was opened yet
		return
	}
	ws, resp, err := dial(b.ctx, b.o, nil)
	if err != nil {
		b.giveUp(fmt.Errorf("%v; and a new connection failed: %s", why, dialFailure(b.o.URL, b.o.Token, resp, err)))
		return
	}
	ctx, abort := context.WithCancelCause(b.ctx)
	defer abort(nil)
	b.sendMu.Lock()
	b.mu.Lock()
	b.ws, b.id = ws, resp.Header.Get("Acp-Connection-Id")
	b.epoch++
	b.conn++
	b.recvd = 0
	b.state, b.abort = reopening, abort
	b.cond.Broadcast()
	b.mu.Unlock()
	b.sent = newSentFrames(sentWindow)
	b.sendMu.Unlock()
	failed := func(how string, err error) {
		_ = ws.CloseNow()
		b.giveUp(fmt.Errorf("%v; and a new connection%s: %v", why, how, err))
	}
	if _, err := b.call(ctx, acp.AgentMethodInitialize, json.RawMessage(init), ""); err != nil {
		failed("'s initialize failed", err)
		return
	}
	b.mu.Lock()
	sessions := maps.Clone(b.sessions)
	b.mu.Unlock()
	resumed := 0
	for sid, at := range sessions {
		params := map[string]any{"sessionId": sid, "cwd": at.cwd, "mcpServers": at.servers}
		if at.servers == nil {
			params["mcpServers"] = json.RawMessage("[]")
		}
		if at.dirs != nil {
			params["additionalDirectories"] = at.dirs
		}
		_, err := b.call(ctx, acp.AgentMethodSessionResume, params, sid)
		var refused *jsonrpc.Error
		if errors.As(err, &refused) {
			fmt.Fprintf(b.stderr, "mm connect: session %s could not be resumed on the new connection: %s\n", sid, refused.Message)
			b.mu.Lock()
			delete(b.sessions, sid)
			b.mu.Unlock()
			continue
		}
		if err != nil {
			failed(" failed while resuming the sessions", err)
			return
		}
		resumed++
	}
	lost := b.failInFlight()
	b.mu.Lock()
	b.state, b.abort = live, nil
	b.cond.Broadcast()
	b.mu.Unlock()
	fmt.Fprintf(b.stderr, "mm connect: %v; opened a new connection, resumed %d session(s), and answered %d request(s) in flight with an error (their answers were lost)\n",
		why, resumed, lost)
}

// call is one of mm connect's own requests on the new connection, given
// connectDialTimeout for its answer; an error says why it failed (the
// socket's failure, when that ended it).
func (b *bridge) call(ctx context.Context, method string, params any, session string) (json.RawMessage, error) {
	cctx, cancel := context.WithTimeout(ctx, connectDialTimeout)
	defer cancel()
	res, err := b.server.Call(cctx, method, params, session)
	if err != nil && cctx.Err() != nil {
		if cause := context.Cause(cctx); cause != nil {
			err = cause
		}
	}
	return res, err
}

// errLost is what the editor's requests in flight when the connection
// was reopened are answered.
var errLost = jsonrpc.Internal("mm connect: the connection to mm serve dropped for longer than the server keeps what it writes, so the answer to this request was lost; mm connect opened a new connection and resumed the sessions: what the request did is in the session's history (load the session to see it)", nil)

// failInFlight answers every request of the editor's written on a lost
// connection and not answered with errLost; it returns how many. Those
// not written yet go on the new connection. The server's requests of the
// lost connection are forgotten.
func (b *bridge) failInFlight() int {
	n := 0
	for id, in := range b.editor.Requests() {
		req, _ := in.Tag.(*request)
		b.mu.Lock()
		written := req != nil && req.conn != 0 && req.conn < b.conn
		b.mu.Unlock()
		if written && b.editor.Respond(id, nil, errLost) {
			n++
		}
	}
	for id := range b.server.Requests() {
		if _, ok := b.server.Take(id); ok {
			b.server.Written(1)
		}
	}
	b.checkDrained()
	return n
}

// cannotResume says whether the server's answer to a resume means the
// connection is gone from it (404) or its frames are (409): a reopen may
// still bring the sessions back.
func cannotResume(resp *http.Response) bool {
	return resp != nil && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusConflict)
}
