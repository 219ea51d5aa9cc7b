package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/jsonrpc"
)

// The streamable HTTP transport, as the TypeScript SDK's AcpServer answers
// it. POST /acp carries one client message: initialize opens a connection
// and is answered inline, with its Acp-Connection-Id; every later message
// names that id and is answered 202 once mm has taken it, mm's replies
// coming on SSE. GET /acp with Accept: text/event-stream opens the
// connection's stream, or with Acp-Session-Id a session's (streams.go).
// DELETE /acp ends the connection. Statuses: 400 a bad request (no or a
// second initialize, a missing or mismatched header, a batch answered
// -32600, an id too long), 404 an unknown connection, 406 a GET without
// text/event-stream, 409 a stream already read, 413 a body longer than
// serve.maxMessageBytes, 415 a body that is not JSON, 499 a client that
// gave up waiting, 503 no place for a new connection.

// sessionScoped says whether a client's POST of method must name its
// session in Acp-Session-Id (the TypeScript SDK's SESSION_SCOPED_METHODS):
// the methods of the one table a client sends about a session.
func sessionScoped(method string) bool {
	return acpmethod.Is(method, func(m acpmethod.Method) bool { return m.Session && !m.ToClient })
}

// keepAlive is how often an idle SSE stream gets a comment line, so that
// proxies keep it open.
const keepAlive = 15 * time.Second

func (s *Server) post(w http.ResponseWriter, r *http.Request, owner string) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		text(w, http.StatusUnsupportedMediaType, "Unsupported Media Type")
		return
	}
	// A message for a connection is read only once the connection is
	// known: a made-up id costs the server no body.
	id := r.Header.Get(headerConnectionID)
	var h *httpConn
	if id != "" {
		if h = s.lookup(id, owner); h == nil {
			text(w, http.StatusNotFound, "Unknown Acp-Connection-Id")
			return
		}
	}
	body, status := s.readBody(w, r)
	// The body's room goes to mm with it; what is not passed on gives
	// its room back here.
	sent := false
	defer func() {
		if !sent {
			body.hold.release()
		}
	}()
	if status != 0 {
		msg := http.StatusText(status)
		switch {
		case body.crowded:
			w.Header().Set("Retry-After", "1")
			msg = s.unreadWhy(body)
		case status == http.StatusRequestEntityTooLarge && body.size > 0:
			msg = s.unreadWhy(body)
		}
		text(w, status, msg)
		return
	}
	m, err := parseMessage(body.msg)
	switch err {
	case errNotJSON:
		text(w, http.StatusBadRequest, "Invalid JSON")
		return
	case errBatch:
		jsonBody(w, http.StatusBadRequest, errorResponse("null", jsonrpc.ErrInvalidRequest.Code, "Invalid request: JSON-RPC batches are not supported", nil))
		return
	case errNotAnObj:
		text(w, http.StatusBadRequest, "Invalid JSON-RPC message")
		return
	}
	if m.isInitialize() {
		if id != "" {
			text(w, http.StatusBadRequest, "Initialize not allowed on existing connection")
			return
		}
		sent = s.initialize(w, r, m, body.hold, owner)
		return
	}
	if h == nil {
		text(w, http.StatusBadRequest, "Missing Acp-Connection-Id")
		return
	}
	var msg string
	if status, msg = h.accept(r.Context(), m, body.hold, r.Header.Get(headerSessionID)); status != http.StatusAccepted {
		text(w, status, msg)
		return
	}
	sent = true
	w.WriteHeader(http.StatusAccepted)
}

// readBody reads a POST's body, at most serve.maxMessageBytes, in the
// server's room for messages (incoming.go), within serve.messageTimeout
// and with none of it missing for the stall timeout; its room is
// body.hold's, which the caller releases, or hands on with the message.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body read, status int) {
	if r.ContentLength > int64(s.o.MaxMessageBytes) {
		return read{size: int(r.ContentLength)}, http.StatusRequestEntityTooLarge
	}
	rc := http.NewResponseController(w)
	end := time.Now().Add(s.o.MessageTimeout)
	// The deadline goes once the body is read: the request may then wait
	// for mm, and the connection may carry other requests.
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	body, err := s.incoming.read(r.Context(), end, http.MaxBytesReader(w, &deadlineReader{r: r.Body, rc: rc, d: s.o.StallTimeout, end: end}, int64(s.o.MaxMessageBytes)+1), s.o.MaxMessageBytes, r.ContentLength)
	var tooLong *http.MaxBytesError
	switch {
	case errors.Is(err, errNoRoom):
		return body, http.StatusServiceUnavailable
	case errors.Is(err, os.ErrDeadlineExceeded) && time.Now().After(end):
		return body, http.StatusRequestTimeout
	case err == nil && body.crowded:
		return body, http.StatusServiceUnavailable
	case errors.As(err, &tooLong), err == nil && body.msg == nil:
		return body, http.StatusRequestEntityTooLarge
	case err != nil:
		return body, http.StatusBadRequest
	}
	return body, 0
}

// initialize opens a connection with mm and answers its initialize
// inline; sent says mm took the message, and its room (held).
func (s *Server) initialize(w http.ResponseWriter, r *http.Request, m message, held *hold, owner string) (sent bool) {
	if !validID(m.id()) || m.id().Raw == "null" {
		text(w, http.StatusBadRequest, "Initialize request must include an ID")
		return false
	}
	c, why := s.open(HTTP, Client{Token: owner, Transport: HTTP})
	if c == nil {
		s.refuse(w, why)
		return false
	}
	h := newHTTPConn(s, c)
	if err := c.connect(h); err != nil {
		c.release()
		jsonBody(w, http.StatusInternalServerError, errorResponse(m.id().Raw, jsonrpc.ErrInternal.Code, "Initialize failed", err.Error()))
		return false
	}
	go h.run()
	id, _ := jsonrpc.IDOf(m.ID)
	m.Tag = route("")
	if err := c.in.Send(r.Context(), m.Message, held); err != nil {
		h.stop("the client gave up on initialize")
		text(w, 499, "Request aborted")
		return false
	}
	select {
	case first := <-h.initial:
		if !first.Response || first.ID != id {
			h.stop("mm did not answer initialize first")
			jsonBody(w, http.StatusInternalServerError, errorResponse(m.id().Raw, jsonrpc.ErrInternal.Code, "Initialize failed", "Expected initialize response from agent"))
			return true
		}
		s.register(h)
		w.Header().Set(headerConnectionID, c.id)
		jsonBody(w, http.StatusOK, first.Data)
	case <-r.Context().Done():
		h.stop("the client gave up on initialize")
		text(w, 499, "Request aborted")
	case <-c.done:
		jsonBody(w, http.StatusInternalServerError, errorResponse(m.id().Raw, jsonrpc.ErrInternal.Code, "Initialize failed", "the agent ended the connection"))
	}
	return true
}

// accept passes one message of an open connection to mm, after the checks
// of the TypeScript SDK's server; it returns 202, or the status refusing
// it.
func (h *httpConn) accept(ctx context.Context, m message, held *hold, header string) (int, string) {
	c := h.c
	if m.isResponse() {
		id, _ := jsonrpc.IDOf(m.ID)
		if status, msg := h.answer(id, header); status != 0 {
			return status, msg
		}
		return h.send(ctx, m, held)
	}
	method, _ := m.method()
	sid, hasSID := m.sessionID()
	if (sessionScoped(method) || hasSID) && header == "" {
		return http.StatusBadRequest, "Missing Acp-Session-Id"
	}
	if header != "" && hasSID && header != sid {
		return http.StatusBadRequest, "Mismatched Acp-Session-Id"
	}
	to := header
	if to == "" {
		to = sid
	}
	if err := c.s.checkIDs(m, to); err != nil {
		return http.StatusBadRequest, err.Error()
	}
	if !m.isNotification() {
		// A reply adds output: a client that does not read what it has
		// cannot make mm produce more.
		if err := h.waitRoom(ctx); err != nil {
			if ctx.Err() != nil {
				return 499, "Request aborted"
			}
			return http.StatusNotFound, "Unknown Acp-Connection-Id"
		}
		if m.isRequest() {
			if method == acp.AgentMethodSessionLoad {
				// Its answer goes to the connection's stream, as the
				// TypeScript SDK routes it, and its history before it.
				m.Tag = loading{session: to}
				h.loadSent(to)
				status, msg := h.send(ctx, m, held)
				if status != http.StatusAccepted {
					h.loadUnsent(to)
				}
				return status, msg
			}
			// Where the answer goes comes back with it (jsonrpc.Out.Tag).
			m.Tag = route(to)
		}
	}
	return h.send(ctx, m, held)
}

// send hands m to mm, with its room.
func (h *httpConn) send(ctx context.Context, m message, held *hold) (int, string) {
	if err := h.c.in.Send(ctx, m.Message, held); err != nil {
		if ctx.Err() != nil {
			return 499, "Request aborted"
		}
		return http.StatusNotFound, "Unknown Acp-Connection-Id"
	}
	return http.StatusAccepted, ""
}

// get serves a stream as SSE.
func (s *Server) get(w http.ResponseWriter, r *http.Request, owner string) {
	if !strings.Contains(strings.ToLower(r.Header.Get("Accept")), "text/event-stream") {
		text(w, http.StatusNotAcceptable, "Not Acceptable")
		return
	}
	id := r.Header.Get(headerConnectionID)
	if id == "" {
		text(w, http.StatusBadRequest, "Missing Acp-Connection-Id")
		return
	}
	h := s.lookup(id, owner)
	if h == nil {
		text(w, http.StatusNotFound, "Unknown Acp-Connection-Id")
		return
	}
	session := r.Header.Get(headerSessionID)
	if len(session) > maxIDLength {
		text(w, http.StatusBadRequest, "Session ID exceeds maxIdLength (1024)")
		return
	}
	last := r.Header.Get(headerLastEvent)
	st, lease, busy, gone := h.acquire(session, last != "")
	switch {
	case gone:
		text(w, http.StatusNotFound, "Unknown Acp-Connection-Id")
		return
	case busy:
		text(w, http.StatusConflict, "Outbound stream already has an active receiver")
		return
	}
	defer h.release(st, session, lease)
	if last != "" {
		n, err := strconv.ParseUint(last, 10, 64)
		if err == nil {
			err = h.rewind(st, n)
		}
		if err != nil {
			text(w, http.StatusConflict, fmt.Sprintf("Cannot resume the stream after Last-Event-ID %q: its next messages are no longer held (serve.resumeWindowBytes); load the session again", last))
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "keep-alive")
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	// A write deadline outlives the response on HTTP/1.1: the next
	// request of this TCP connection must not inherit it.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		e, ok := h.next(r.Context(), st, lease, tick.C)
		if !ok {
			return
		}
		var err error
		if e.line == nil {
			err = s.writeSSE(w, rc, []byte(":\n\n"))
		} else {
			err = s.writeSSE(w, rc, []byte("id: "+strconv.FormatUint(e.id, 10)+"\ndata: "), e.line, []byte("\n\n"))
		}
		if err != nil {
			// A write that waited its deadline is a stall, whatever the
			// request's context says: net/http cancels it on that very
			// error (its connection's writer does), before the error
			// comes back here.
			if errors.Is(err, os.ErrDeadlineExceeded) {
				h.stop("the client read nothing for serve.stallTimeout")
			}
			return
		}
	}
}

// writeSSE writes an event in pieces, each under a write deadline of the
// stall timeout, and flushes it.
func (s *Server) writeSSE(w http.ResponseWriter, rc *http.ResponseController, parts ...[]byte) error {
	for _, p := range parts {
		for len(p) > 0 {
			piece := p[:min(len(p), stallPiece)]
			_ = rc.SetWriteDeadline(time.Now().Add(s.o.StallTimeout))
			n, err := w.Write(piece)
			if err != nil {
				return err
			}
			p = p[n:]
		}
	}
	_ = rc.SetWriteDeadline(time.Now().Add(s.o.StallTimeout))
	return rc.Flush()
}

// deadlineReader gives each read of a body the stall timeout, and the
// whole body until end.
type deadlineReader struct {
	r   io.ReadCloser
	rc  *http.ResponseController
	d   time.Duration
	end time.Time
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	dl := time.Now().Add(d.d)
	if !d.end.IsZero() && d.end.Before(dl) {
		dl = d.end
	}
	_ = d.rc.SetReadDeadline(dl)
	return d.r.Read(p)
}

func (d *deadlineReader) Close() error { return d.r.Close() }

// delete ends a connection at its client's request.
func (s *Server) delete(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.Header.Get(headerConnectionID)
	if id == "" {
		text(w, http.StatusBadRequest, "Missing Acp-Connection-Id")
		return
	}
	h := s.lookup(id, owner)
	if h == nil {
		text(w, http.StatusNotFound, "Unknown Acp-Connection-Id")
		return
	}
	h.stop("the client ended it (DELETE)")
	w.WriteHeader(http.StatusAccepted)
}

// register makes an initialized connection reachable by its id.
func (s *Server) register(h *httpConn) {
	s.mu.Lock()
	s.byID[h.c.id] = h
	s.mu.Unlock()
	h.mu.Lock()
	if !h.stopped && !h.finished && !h.conn.leased {
		h.watchAbandon()
	}
	h.mu.Unlock()
}

func (s *Server) unregister(h *httpConn) {
	s.mu.Lock()
	if s.byID[h.c.id] == h {
		delete(s.byID, h.c.id)
	}
	s.mu.Unlock()
}

// lookup finds a connection by id for the token that opened it: to any
// other token, it does not exist.
func (s *Server) lookup(id, owner string) *httpConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.byID[id]
	if h == nil || h.c.client.Token != owner {
		return nil
	}
	return h
}

func jsonBody(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
