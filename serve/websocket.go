package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/jsonrpc"
)

// The WebSocket transport: GET /acp with Upgrade: websocket, then one
// JSON-RPC message per text frame each way. The first message must be
// initialize; mm's side of the connection opens with it. Every frame after
// it is made one line and handed to mm's inbox in the order read; every
// line mm writes is one frame. As in the TypeScript SDK's server, nothing
// is routed: the socket carries all of it, in mm's order.
//
// Bounds. The reader takes one frame at a time and does not read the next
// until mm has taken it, so a client that writes faster than mm reads is
// pushed back by TCP. mm's writes go straight to the socket; when the
// client does not read, they wait, and so does mm's ordered writer behind
// them. A write that moves nothing for serve.stallTimeout ends the
// connection (stallConn). A message longer than serve.maxMessageBytes is
// read to its end, dropped, and answered -32600 with its id, naming the
// key (unread).

// wsConn is one WebSocket connection.
type wsConn struct {
	c    *connection
	ws   *websocket.Conn
	sock *stallConn // under ws: corks a batch's frames into one write
	max  int        // serve.maxMessageBytes
	// in is the server's room for messages being read; msgTimeout how
	// long one may take (serve.messageTimeout).
	in          *incoming
	msgTimeout  time.Duration
	initTimeout time.Duration // serve.stallTimeout: initialize must come by then
	late        *time.Timer   // ends a message past msgTimeout; the reader's own
	// ctx is the reader's: it ends when the connection ends or a resume
	// takes it from this socket, so that a reader waiting for room, or
	// for mm to take a message, stops waiting.
	ctx  context.Context
	stop context.CancelFunc

	// mu orders the start of mm's side with the end of the connection;
	// it is not held while mm's side opens (Connect may write).
	mu         sync.Mutex
	opened     *sync.Cond // signalled when an opening is over
	connecting bool       // mm's side is opening
	connected  bool       // mm's side is open: done will close
	closing    bool
	code       websocket.StatusCode
	reason     string

	broken atomic.Bool // a write failed: the client is gone, output is dropped

	// superseded: a resume took the connection from this socket (wsOut's
	// mu guards it); readDone is closed once this socket's reader has
	// stopped and said whether it let the connection go (detach).
	superseded bool
	readDone   chan struct{}
	detached   bool // guarded by mu: the connection went on without this socket
}

func (s *Server) serveWebSocket(w http.ResponseWriter, r *http.Request, owner string) {
	if id, cursor, ok, err := resumeRequest(r); ok {
		if err != nil {
			text(w, http.StatusBadRequest, err.Error())
			return
		}
		s.serveResume(w, r, owner, id, cursor)
		return
	}
	c, why := s.open(WebSocket, Client{Token: owner, Transport: WebSocket})
	if c == nil {
		s.refuse(w, why)
		return
	}
	c.ws = newWSOut(c, s.o.ResumeWindowBytes, s.o.ResumeTimeout)
	if r.Header.Get(headerResume) == "1" {
		c.ws.makeResumable()
	}
	// The TypeScript SDK's adapter names the connection in the 101.
	w.Header().Set(headerConnectionID, c.id)
	hj := &stallHijacker{ResponseWriter: w, stall: s.o.StallTimeout}
	ws, err := websocket.Accept(hj, r, acceptOptions(r))
	if err != nil {
		c.release()
		return // Accept has answered
	}
	ws.SetReadLimit(-1) // readMessage bounds each message
	t := s.newWSConn(c, ws, hj.sock)
	c.ws.attach(t)
	t.serve(false)
}

// newWSConn is a socket of connection c.
func (s *Server) newWSConn(c *connection, ws *websocket.Conn, sock *stallConn) *wsConn {
	t := &wsConn{c: c, ws: ws, sock: sock, max: s.o.MaxMessageBytes, in: s.incoming, msgTimeout: s.o.MessageTimeout,
		initTimeout: s.o.StallTimeout, readDone: make(chan struct{})}
	t.ctx, t.stop = context.WithCancel(context.Background())
	t.opened = sync.NewCond(&t.mu)
	return t
}

// serve reads the socket until it ends (started: the connection is open
// already, a resume's), then ends the connection and gives its place back,
// unless the connection goes on without this socket (wsOut.detach).
func (t *wsConn) serve(started bool) {
	defer t.stop()
	read := make(chan struct{})
	closed := make(chan struct{})
	go t.closer(read, closed)
	onPurpose := t.read(started)
	t.mu.Lock()
	connected := t.connected
	t.mu.Unlock()
	// Only an open connection goes on without its socket.
	detached := connected && t.c.ws.detach(t, onPurpose)
	t.mu.Lock()
	t.detached = detached
	t.mu.Unlock()
	close(t.readDone)
	close(read)
	if !detached {
		t.c.end("the client left")
	}
	<-closed
	_ = t.ws.CloseNow()
	if !detached {
		t.c.release()
	}
}

// closer closes the socket once the connection ends from this side (a
// drain, a stall, a limit, mm's end), after mm's last answers are out.
func (t *wsConn) closer(read, closed chan struct{}) {
	defer close(closed)
	select {
	case <-read:
	case <-t.c.endc:
		t.stop() // a reader waiting for room or for mm waits no more
	}
	t.mu.Lock()
	if t.detached {
		t.mu.Unlock()
		_ = t.ws.CloseNow()
		return
	}
	t.closing = true
	for t.connecting {
		t.opened.Wait()
	}
	connected, code, reason := t.connected, t.code, t.reason
	t.mu.Unlock()
	if connected {
		<-t.c.done
	} else if code != 0 {
		t.c.log.Warn(fmt.Sprintf("[serve] websocket of %s closed before initialize: %s", t.c.client.Token, reason))
	}
	if code == 0 {
		code, reason = websocket.StatusGoingAway, "server shutting down"
	}
	if t.broken.Load() || code == dropSocket {
		_ = t.ws.CloseNow()
		return
	}
	// The close handshake waits for the client's close frame, 5 s at most
	// for each half.
	_ = t.ws.Close(code, reason)
}

// dropSocket is the code of an end without a close frame: the socket is
// dropped (a client that reads nothing would not read one).
const dropSocket = websocket.StatusAbnormalClosure

// close ends the connection with a close frame of this code and reason.
func (t *wsConn) close(code websocket.StatusCode, reason string) {
	t.mu.Lock()
	if t.code == 0 {
		t.code, t.reason = code, reason
	}
	t.mu.Unlock()
	t.c.end(reason)
}

// read serves the client's frames until the socket closes, and says
// whether it was closed on purpose: by a close frame of the client's, or
// by mm (then the connection ends, resumable or not). started: the
// connection is open already (a resume's).
func (t *wsConn) read(started bool) (onPurpose bool) {
	// A socket that never initializes would hold a place for nothing.
	noInit := time.AfterFunc(t.initTimeout, func() {
		t.close(websocket.StatusPolicyViolation, "no initialize within serve.stallTimeout")
	})
	if started {
		noInit.Stop()
	}
	defer noInit.Stop()
	warned := false
	for {
		typ, r, err := t.ws.Reader(context.Background())
		if err != nil {
			t.mu.Lock()
			closing := t.code != 0
			t.mu.Unlock()
			return closing || websocket.CloseStatus(err) != -1
		}
		if typ != websocket.MessageText {
			if !warned {
				t.c.log.Warn("[serve] binary WebSocket frames are ignored: ACP messages are text")
				warned = true
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				return false
			}
			if started {
				t.c.ws.took()
			}
			continue
		}
		m, err := t.message(r)
		if err != nil {
			m.hold.release()
			return true // mm ended it (messageTimeout, no room)
		}
		if m.msg == nil {
			m.hold.release()
			t.unread(m)
			if started {
				t.c.ws.took()
			}
			continue
		}
		if !started {
			var ok bool
			started, ok = t.initialize(m, noInit)
			if !ok {
				return true
			}
			continue
		}
		if !t.forward(m) {
			return true
		}
		t.c.ws.took()
	}
}

// message reads the rest of a message whose first frame has come, in the
// server's room for messages (incoming.go), within serve.messageTimeout:
// a message still coming then, or that found no room by then, ends the
// connection (1008, saying which; 1013 for no room).
func (t *wsConn) message(r io.Reader) (read, error) {
	if t.late == nil {
		// One timer for the connection, set again for each message.
		t.late = time.AfterFunc(time.Hour, func() {
			why := fmt.Sprintf("a message took longer than serve.messageTimeout (%s) to arrive", t.msgTimeout)
			t.close(websocket.StatusPolicyViolation, why)
			// The close frame ends the read in progress (the client
			// answers it, or Close gives up on it and drops the socket).
			_ = t.ws.Close(websocket.StatusPolicyViolation, why)
		})
	}
	t.late.Reset(t.msgTimeout)
	defer t.late.Stop()
	m, err := t.in.read(t.ctx, time.Now().Add(t.msgTimeout), r, t.max, -1)
	if errors.Is(err, errNoRoom) {
		t.close(websocket.StatusTryAgainLater, "the server has no room for the message now (serve.maxIncomingBytes)")
	}
	return m, err
}

// headBytes is how much of a message too long to read is kept to find its
// id.
const headBytes = jsonrpc.HeadBytes

// unread answers a message read to its end and dropped, longer than
// serve.maxMessageBytes or too heavy for serve.maxIncomingBytes, as mm's
// ingress answers a line too long on stdio: -32600 with its id, naming
// the key.
func (t *wsConn) unread(m read) {
	id := "null"
	if v := jsonrpc.HeadID(m.head); v != nil {
		id = string(v)
	}
	t.reply(errorResponse(id, jsonrpc.ErrInvalidRequest.Code, "Invalid request", map[string]string{"error": t.c.s.unreadWhy(m)}))
}

// initialize serves a message read before initialize, as the TypeScript
// SDK's server does: answers to nothing are ignored, what is not a request
// is answered -32600, and the first request must be initialize with an id,
// else the socket closes with 1002. started says mm's side is open; ok
// false stops the reader.
func (t *wsConn) initialize(r read, noInit *time.Timer) (started, ok bool) {
	sent := false
	defer func() {
		if !sent {
			r.hold.release()
		}
	}()
	m, err := parseMessage(r.msg)
	if err != nil {
		t.badMessage(err)
		return false, true
	}
	switch {
	case m.isResponseShaped():
		return false, true
	case !m.isRequest() && !m.isNotification():
		t.reply(errorResponse("null", jsonrpc.ErrInvalidRequest.Code, "Invalid request", nil))
		return false, true
	case !m.isInitialize():
		t.close(websocket.StatusProtocolError, "First message must be initialize")
		return false, false
	case m.id().Type == gjson.Null:
		t.close(websocket.StatusProtocolError, "Initialize request must include an ID")
		return false, false
	}
	if !noInit.Stop() {
		return false, false // too late: the socket is closing
	}
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return false, false
	}
	t.connecting = true
	t.mu.Unlock()
	if gjson.GetBytes(m.Params, `_meta.acp/transport.resume`).Bool() {
		t.c.ws.makeResumable()
	}
	if id, ok := jsonrpc.IDOf(m.ID); ok {
		t.c.ws.initializing(id)
	}
	err = t.c.connect(t.c.ws)
	t.mu.Lock()
	t.connecting, t.connected = false, err == nil
	t.opened.Broadcast()
	t.mu.Unlock()
	if err != nil {
		t.reply(errorResponse(m.id().Raw, jsonrpc.ErrInternal.Code, "Initialize failed", err.Error()))
		t.close(websocket.StatusInternalError, "Initialize failed")
		return false, false
	}
	sent, ok = t.send(m, r.hold)
	return true, ok
}

// forward passes one message of an initialized connection to mm, with
// its room; the room is given back if it is not passed on.
func (t *wsConn) forward(r read) bool {
	m, err := parseMessage(r.msg)
	if err != nil {
		r.hold.release()
		t.badMessage(err)
		return true
	}
	if m.isRequest() && m.isInitialize() {
		r.hold.release()
		t.reply(errorResponse(m.id().Raw, jsonrpc.ErrInvalidRequest.Code, "Initialize not allowed on existing connection", nil))
		return true
	}
	sent, ok := t.send(m, r.hold)
	if !sent {
		r.hold.release()
	}
	return ok
}

// send hands m to mm with its room h, recording a request's id until mm
// answers it. sent says mm took it (and its room); ok false stops the
// reader.
func (t *wsConn) send(m message, h *hold) (sent, ok bool) {
	sid, _ := m.sessionID()
	if err := t.c.s.checkIDs(m, sid); err != nil {
		t.close(websocket.StatusPolicyViolation, err.Error())
		return false, false
	}
	if err := t.c.in.Send(t.ctx, m.Message, h); err != nil {
		return false, false
	}
	return true, true
}

// badMessage answers a frame that is not one JSON-RPC object.
func (t *wsConn) badMessage(err error) {
	switch err {
	case errNotJSON:
		t.reply(errorResponse("null", jsonrpc.ErrParse.Code, "Parse error", nil))
	case errBatch:
		t.reply(errorResponse("null", jsonrpc.ErrInvalidRequest.Code, "Invalid request: JSON-RPC batches are not supported", nil))
	default:
		t.reply(errorResponse("null", jsonrpc.ErrInvalidRequest.Code, "Invalid request", nil))
	}
}

// reply writes one message of the transport's own, in the connection's
// order (wsOut).
func (t *wsConn) reply(b []byte) { t.c.ws.reply(b) }

// writeFrame writes one frame on this socket. It waits while the client
// does not read; once the client is gone (a write failed), what mm writes
// is dropped, as on a closed pipe, so that mm's shutdown does not wait on
// it. wsOut.Write corks a batch's frames (what the outbox queued while the
// last one was written) into one write to the socket, as the lines of a
// batch go to a pipe: the WebSocket library flushes each message, and a
// write per frame cost mm serve about a quarter of its CPU under load.
// It is called with wsOut.mu held (Write, resume), which failed takes: a
// failure is handled once the lock is given back.
func (t *wsConn) writeFrame(b []byte) {
	if t.broken.Load() {
		return
	}
	if err := t.ws.Write(context.Background(), websocket.MessageText, b); err != nil {
		go t.failed(err)
	}
}

// failed ends a connection whose write failed: the client is gone, or it
// read nothing for the stall timeout.
func (t *wsConn) failed(err error) {
	if t.broken.Swap(true) {
		return
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.close(dropSocket, "the client read nothing for serve.stallTimeout")
	case t.c.ws.isResumable():
		// The reader sees the socket end, and the connection waits for a
		// resume (wsOut.detach).
	default:
		t.c.end("the client left")
	}
	_ = t.ws.CloseNow()
}
