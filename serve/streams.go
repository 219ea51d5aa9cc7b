package serve

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mm-agent/mm/jsonrpc"
)

// The outbound side of a streamable HTTP connection, as the TypeScript
// SDK's ConnectionState routes it. Every line mm writes goes to one stream:
//
//   - a response goes where its request's route says — the route the
//     POST gave the request as its Tag, which comes back with the answer
//     (jsonrpc.Out.Tag): the stream of the session its request named
//     (Acp-Session-Id or params.sessionId), else the connection's;
//     session/load's response goes to the connection's stream, whatever
//     session it loads;
//   - while a session/load of this connection's is unanswered, the
//     notifications of the session it loads (its history, replayed) go to
//     the connection's stream too, before the load's response: ACP wants
//     the history before the response, and only one stream keeps an
//     order. On the session's stream, a client that reads both streams
//     could get the response first, and one that opens the session's
//     stream once the load is answered (as the RFD's clients do) always
//     did;
//   - any other request or notification about a session
//     (jsonrpc.Out.Session) goes to that session's stream, created if the
//     client has not opened it yet; the client's answer to a request of
//     mm's must name the same session (mm's table of its calls says which:
//     Conn.Awaits);
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
	initial  chan jsonrpc.Out // the first message mm writes: initialize's answer, which the POST returns
	gotFirst bool
	conn     *stream
	sessions map[string]*stream
	unread   int           // session streams that hold messages and have no reader
	bytes    int           // held by all streams
	progress chan struct{} // closed and replaced when a reader takes a message or the connection stops
	// loading counts, by session, the session/loads unanswered.
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
	return &httpConn{s: s, c: c, initial: make(chan jsonrpc.Out, 1), conn: newStream(), sessions: map[string]*stream{},
		progress: make(chan struct{}), loading: map[string]int{}}
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

// Write is mm's way out: each message routed to its stream. It returns
// once the streams hold less than MaxBufferedBytes, the client having read
// enough, or once the connection is stopped (what mm writes then is
// dropped, as on a closed pipe).
func (h *httpConn) Write(o jsonrpc.Out) error { return h.WriteBatch([]jsonrpc.Out{o}) }

// WriteBatch routes messages as Write does, then waits for room once.
func (h *httpConn) WriteBatch(outs []jsonrpc.Out) error {
	for _, o := range outs {
		if len(o.Data) > 0 {
			h.route(o)
		}
	}
	_ = h.waitRoom(context.Background())
	return nil
}

// route is a POST's route for its request, given as the request's Tag:
// the session whose stream its answer goes to ("" the connection's).
type route string

// loading is the Tag of a session/load: the session it loads, whose
// notifications go to the connection's stream until it is answered; its
// answer goes there too.
type loading struct{ session string }

func (h *httpConn) route(o jsonrpc.Out) {
	session := o.Session
	load, isLoad := o.Tag.(loading)
	if o.Response {
		r, _ := o.Tag.(route)
		session = string(r)
	}
	// mm's encoder reuses its buffers: a stream keeps its own copy.
	line := bytes.Clone(o.Data)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	if !h.gotFirst {
		h.gotFirst = true
		o.Data = line
		h.initial <- o
		return
	}
	switch {
	case o.Response && isLoad:
		h.loadedLocked(load.session)
	case !o.Response && o.ID.IsZero() && h.loading[session] > 0:
		session = "" // a load's history: before its response
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

// loadSent counts a session/load of session on its way to mm.
func (h *httpConn) loadSent(session string) {
	h.mu.Lock()
	h.loading[session]++
	h.mu.Unlock()
}

// loadUnsent forgets a session/load that mm did not take.
func (h *httpConn) loadUnsent(session string) {
	h.mu.Lock()
	h.loadedLocked(session)
	h.mu.Unlock()
}

// loadedLocked forgets a session/load of session: answered, or not sent.
func (h *httpConn) loadedLocked(session string) {
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
// session its request went to.
func (h *httpConn) answer(id jsonrpc.ID, header string) (status int, msg string) {
	session, ok := h.c.awaits(id)
	if ok && session != "" {
		if header == "" {
			return 400, "Missing Acp-Session-Id"
		}
		if header != session {
			return 400, "Mismatched Acp-Session-Id"
		}
	}
	return 0, ""
}
