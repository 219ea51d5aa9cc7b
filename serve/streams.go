package serve

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"
)

// The outbound side of a streamable HTTP connection, as the TypeScript
// SDK's ConnectionState routes it. Every line mm writes goes to one stream:
//
//   - a response goes where its request's route says (connection.pending):
//     the stream of the session its request named (Acp-Session-Id or
//     params.sessionId), else the connection's; session/load's response
//     goes to the connection's stream, whatever session it loads;
//   - while a session/load of this connection's is unanswered, the
//     notifications of the session it loads (its history, replayed) go to
//     the connection's stream too, before the load's response: ACP wants
//     the history before the response, and only one stream keeps an
//     order. On the session's stream, a client that reads both streams
//     could get the response first, and one that opens the session's
//     stream once the load is answered (as the RFD's clients do) always
//     did;
//   - any other request or notification with a params.sessionId goes to
//     that session's stream, created if the client has not opened it yet; mm's
//     requests record their route (calls), so that the client's answer
//     must name the same session;
//   - anything else goes to the connection's stream.
//
// A stream is read by at most one GET at a time (SSE). What waits in the
// streams is bounded: in bytes (MaxBufferedBytes, all streams together;
// when they hold that much, mm's Write waits, and with it mm's ordered
// writer, until a reader takes a message), and in session streams that
// hold messages without a reader (MaxBufferedSessionStreams; one more
// ends the connection). A connection whose writer has waited
// serve.stallTimeout with no message taken, or whose connection stream
// has had no reader that long, ends: the client is not coming back for
// it.
//
// Concurrency: Write is called by mm's writer (one at a time); the GET,
// POST and DELETE handlers call the rest from their own goroutines. mu
// guards every field below it; it is taken before Server.mu and
// connection.mu, never after.
type httpConn struct {
	s *Server
	c *connection

	mu       sync.Mutex
	initial  chan []byte // the first line mm writes: initialize's answer, which the POST returns
	gotFirst bool
	conn     *stream
	sessions map[string]*stream
	unread   int           // session streams that hold messages and have no reader
	bytes    int           // held by all streams
	progress chan struct{} // closed and replaced when a reader takes a message or the connection stops
	calls    map[string]string
	// loads are the session/load requests unanswered (by id key), each
	// with the session it loads; loading counts them by session.
	loads    map[string]string
	loading  map[string]int
	kept     int         // bytes of messages kept for a Last-Event-ID, all streams together
	stopped  bool        // output is dropped: DELETE, a stall, a limit
	finished bool        // mm's side has ended: a stream ends once read
	abandon  *time.Timer // runs while the connection stream has no reader
}

// stream is one SSE stream's queue. Each message has an id (the SSE
// event's), from 1; the messages a GET took are kept, the last
// serve.resumeWindowBytes of them over the connection's streams, so that a
// GET that comes back with Last-Event-ID gets those after it again.
type stream struct {
	queue   []event
	head    int
	leased  bool
	lease   uint64        // which GET holds it: a GET that resumes takes it from a stale one
	counted bool          // counted in httpConn.unread: it holds messages and has no reader
	wake    chan struct{} // a message, or the end
	nextID  uint64
	kept    []event
}

// event is one message of a stream, with its SSE id.
type event struct {
	id   uint64
	line []byte
}

func newStream() *stream { return &stream{wake: make(chan struct{}, 1), nextID: 1} }

func (st *stream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

func (st *stream) held() bool { return st.head < len(st.queue) }

func newHTTPConn(s *Server, c *connection) *httpConn {
	return &httpConn{s: s, c: c, initial: make(chan []byte, 1), conn: newStream(), sessions: map[string]*stream{},
		progress: make(chan struct{}), calls: map[string]string{}, loads: map[string]string{}, loading: map[string]int{}}
}

// run ends the connection's streams once mm's side is over and gives its
// place back.
func (h *httpConn) run() {
	<-h.c.done
	h.mu.Lock()
	h.finished = true
	h.wakeAll()
	if h.abandon != nil {
		h.abandon.Stop()
	}
	h.mu.Unlock()
	h.s.unregister(h)
	h.c.release()
}

// Write is mm's way out: each line routed to its stream. It returns once
// the streams hold less than MaxBufferedBytes, the client having read
// enough, or once the connection is stopped (what mm writes then is
// dropped, as on a closed pipe).
func (h *httpConn) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) > 0 {
			h.route(bytes.Clone(line))
		}
	}
	_ = h.waitRoom(context.Background())
	return len(p), nil
}

func (h *httpConn) route(line []byte) {
	o := parseOut(line)
	var session string
	if o.response && o.id != "" {
		session = h.c.answered(o.id)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	if !h.gotFirst {
		h.gotFirst = true
		h.initial <- line
		return
	}
	if len(o.result) > maxIDLength {
		h.stopLocked("mm named a session id longer than maxIdLength")
		return
	}
	if o.response {
		h.loadedLocked(o.id)
	} else {
		session = o.sessionID
		if o.id != "" {
			h.calls[o.id] = session
		} else if h.loading[session] > 0 {
			session = "" // a load's history: before its response
		}
	}
	st := h.conn
	if session != "" {
		st = h.sessions[session]
		if st == nil {
			if h.unread >= h.s.o.MaxBufferedSessionStreams {
				h.stopLocked("more session streams unread than maxBufferedSessionStreams")
				return
			}
			st = newStream()
			st.counted = true
			h.sessions[session] = st
			h.unread++
		} else if !st.leased && !st.counted {
			// A stream kept for its Last-Event-ID holds messages again.
			if h.unread >= h.s.o.MaxBufferedSessionStreams {
				h.stopLocked("more session streams unread than maxBufferedSessionStreams")
				return
			}
			st.counted = true
			h.unread++
		}
	}
	st.queue = append(st.queue, event{st.nextID, line})
	st.nextID++
	h.bytes += len(line)
	st.signal()
}

// loadSent records a session/load (id key) of session, before mm has it:
// until it is answered, the session's notifications go to the connection's
// stream, with the response.
func (h *httpConn) loadSent(key, session string) {
	h.mu.Lock()
	h.loads[key] = session
	h.loading[session]++
	h.mu.Unlock()
}

// loadUnsent forgets a session/load that mm did not take.
func (h *httpConn) loadUnsent(key string) {
	h.mu.Lock()
	h.loadedLocked(key)
	h.mu.Unlock()
}

// loadedLocked forgets the session/load that key answers, if it was one.
func (h *httpConn) loadedLocked(key string) {
	session, ok := h.loads[key]
	if !ok {
		return
	}
	delete(h.loads, key)
	if h.loading[session]--; h.loading[session] <= 0 {
		delete(h.loading, session)
	}
}

// waitRoom waits while the streams hold MaxBufferedBytes or more. A wait
// with nothing taken for the stall timeout stops the connection.
func (h *httpConn) waitRoom(ctx context.Context) error {
	h.mu.Lock()
	for h.bytes >= h.s.o.MaxBufferedBytes && !h.stopped && !h.finished {
		progress := h.progress
		h.mu.Unlock()
		t := time.NewTimer(h.s.o.StallTimeout)
		select {
		case <-progress:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
			h.stop("the client read nothing for serve.stallTimeout")
		}
		t.Stop()
		h.mu.Lock()
	}
	stopped := h.stopped
	h.mu.Unlock()
	if stopped {
		return errClosed
	}
	return nil
}

// stop ends the connection now, dropping what waits for the client: the
// client ended it, stalled, or broke a limit. mm's inbox closes; mm winds
// down, its last messages dropped.
func (h *httpConn) stop(why string) {
	h.mu.Lock()
	h.stopLocked(why)
	h.mu.Unlock()
}

func (h *httpConn) stopLocked(why string) {
	if h.stopped {
		return
	}
	h.stopped = true
	h.conn.queue, h.conn.head = nil, 0
	for _, st := range h.sessions {
		st.queue, st.head = nil, 0
	}
	h.bytes = 0
	if h.abandon != nil {
		h.abandon.Stop()
	}
	h.wakeAll()
	h.s.unregister(h)
	h.c.end(why)
}

// wakeAll wakes every reader and writer; h.mu is held.
func (h *httpConn) wakeAll() {
	h.conn.signal()
	for _, st := range h.sessions {
		st.signal()
	}
	close(h.progress)
	h.progress = make(chan struct{})
}

// acquire gives a GET the stream it asks for: the connection's (session
// "") or a session's, made if need be, and the lease that names this GET's
// hold on it. busy: another GET reads it (unless resume: a GET with
// Last-Event-ID takes the stream from one whose connection went quiet
// under it, which ends); gone: the connection is over.
func (h *httpConn) acquire(session string, resume bool) (st *stream, lease uint64, busy, gone bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.finished {
		return nil, 0, false, true
	}
	if session == "" {
		st = h.conn
	} else if st = h.sessions[session]; st == nil {
		st = newStream()
		h.sessions[session] = st
	}
	if st.leased {
		if !resume {
			return nil, 0, true, false
		}
		st.lease++ // the stale GET's next sees it and ends
		st.signal()
		return st, st.lease, false, false
	}
	st.leased = true
	st.lease++
	if session == "" {
		if h.abandon != nil {
			h.abandon.Stop()
		}
	} else if st.counted {
		st.counted = false
		h.unread--
	}
	return st, st.lease, false, false
}

// errCursor is a Last-Event-ID whose next messages a stream no longer
// holds.
var errCursor = errors.New("cursor not held")

// rewind puts the kept messages after Last-Event-ID last back at the
// front of st, which its GET has just leased, so that they are sent again.
func (h *httpConn) rewind(st *stream, last uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	oldest := st.nextID
	switch {
	case len(st.kept) > 0:
		oldest = st.kept[0].id
	case st.held():
		oldest = st.queue[st.head].id
	}
	if last+1 < oldest || last >= st.nextID {
		return errCursor
	}
	i := 0
	for i < len(st.kept) && st.kept[i].id <= last {
		i++
	}
	again := st.kept[i:]
	for _, e := range again {
		h.bytes += len(e.line)
		h.kept -= len(e.line)
	}
	for _, e := range st.kept[:i] {
		h.kept -= len(e.line)
	}
	st.queue = append(append([]event(nil), again...), st.queue[st.head:]...)
	st.head = 0
	st.kept = nil
	return nil
}

// keep keeps a message a GET took, for a Last-Event-ID; the oldest of
// st's go past the window. h.mu is held.
func (h *httpConn) keep(st *stream, e event) {
	st.kept = append(st.kept, e)
	h.kept += len(e.line)
	for h.kept > h.s.o.ResumeWindowBytes && len(st.kept) > 1 {
		h.kept -= len(st.kept[0].line)
		st.kept[0] = event{}
		st.kept = st.kept[1:]
	}
}

// release gives a stream back when its GET ends, unless another GET took
// it (lease). A session stream with nothing held is dropped; one that
// holds messages counts as unread again.
func (h *httpConn) release(st *stream, session string, lease uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st.lease != lease {
		return // a resuming GET holds it now
	}
	st.leased = false
	if h.stopped || h.finished {
		return
	}
	if session == "" {
		h.watchAbandon()
		return
	}
	if !st.held() {
		if len(st.kept) == 0 {
			delete(h.sessions, session)
		}
		return // kept for a GET that comes back with Last-Event-ID
	}
	st.counted = true
	h.unread++
	if h.unread > h.s.o.MaxBufferedSessionStreams {
		h.stopLocked("more session streams unread than maxBufferedSessionStreams")
	}
}

// watchAbandon starts the clock of a connection stream without a reader;
// h.mu is held.
func (h *httpConn) watchAbandon() {
	if h.abandon == nil {
		h.abandon = time.AfterFunc(h.s.o.StallTimeout, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if !h.conn.leased {
				h.stopLocked("the client has had no stream open for serve.stallTimeout")
			}
		})
		return
	}
	h.abandon.Reset(h.s.o.StallTimeout)
}

// next waits for st's next message, and keeps it for a Last-Event-ID. It
// returns ok false once the stream is over (the connection stopped, or
// finished and st read to its end), and a nil line, ok true when tick
// fires first (time for a keep-alive).
func (h *httpConn) next(ctx context.Context, st *stream, lease uint64, tick <-chan time.Time) (event, bool) {
	for {
		h.mu.Lock()
		switch {
		case h.stopped, st.lease != lease:
			h.mu.Unlock()
			return event{}, false
		case st.held():
			e := st.queue[st.head]
			line := e.line
			st.queue[st.head] = event{}
			st.head++
			h.keep(st, e)
			// Taken messages are dropped from the front once they are
			// most of the queue, so that a queue that never empties does
			// not keep them all.
			if st.head == len(st.queue) {
				st.queue, st.head = st.queue[:0], 0
			} else if st.head >= 1024 && 2*st.head >= len(st.queue) {
				st.queue, st.head = append([]event(nil), st.queue[st.head:]...), 0
			}
			h.bytes -= len(line)
			close(h.progress)
			h.progress = make(chan struct{})
			h.mu.Unlock()
			return e, true
		case h.finished:
			h.mu.Unlock()
			return event{}, false
		}
		h.mu.Unlock()
		select {
		case <-st.wake:
		case <-ctx.Done():
			return event{}, false
		case <-tick:
			return event{}, true
		}
	}
}

// answer checks the client's answer to one of mm's requests against the
// session its request went to, and forgets the request.
func (h *httpConn) answer(key, header string) (status int, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	session, ok := h.calls[key]
	if ok && session != "" {
		if header == "" {
			return 400, "Missing Acp-Session-Id"
		}
		if header != session {
			return 400, "Mismatched Acp-Session-Id"
		}
	}
	delete(h.calls, key)
	return 0, ""
}
