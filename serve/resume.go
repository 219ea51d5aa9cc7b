package serve

import (
	"github.com/mm-agent/mm/jsonrpc"

	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// A resumable WebSocket connection outlives its socket. A client that says
// it will resume (the upgrade's Acp-Resume: 1, or initialize's
// params._meta["acp/transport"].resume) gets a connection whose socket may
// drop without ending it: mm's side goes on (the turn in flight with it),
// and what mm writes meanwhile is kept, with what it wrote last, in a window
// of serve.resumeWindowBytes. The client comes back within
// serve.resumeTimeout with a new upgrade that names the connection
// (Acp-Connection-Id) and how many frames of it the client has read
// (Last-Event-ID: the cursor, the number of the last frame read; frames
// are numbered from 1, the first frame mm wrote on the connection). mm
// answers the upgrade with Acp-Received: the number of the client's
// frames it has taken (the initialize request not counted), so that the
// client sends again those that were lost; then it writes the frames after
// the cursor, in order, and the connection goes on on the new socket. A
// cursor mm no longer holds the frames after is answered 409, and an unknown
// connection 404: the client falls back to session/resume or
// session/load on a new connection.
//
// Ownership. One party at a time answers for a connection's end and
// release: the handler of the socket that carries it, or, while no socket
// carries it, the goroutine that waits for its resume (awaitResume). A
// resume takes the connection from whichever holds it.

// Headers of a resume.
const (
	headerResume     = "Acp-Resume"
	headerLastEvent  = "Last-Event-ID"
	headerReceived   = "Acp-Received"
	transportMetaKey = "acp/transport"
)

// wsOut is mm's way out of a WebSocket connection, across the sockets that
// carry it, and the frames it keeps for a resume.
//
// Concurrency: Write is mm's writer's; the rest is called by the sockets'
// handlers. mu guards every field below it, and is held while a frame is
// written to the socket, so that a resume's replay and mm's next frames
// keep their order.
type wsOut struct {
	c      *connection
	window int           // serve.resumeWindowBytes
	wait   time.Duration // serve.resumeTimeout

	// resumable is read without mu: a write that fails, with mu held,
	// asks it (wsConn.failed).
	resumable atomic.Bool

	mu        sync.Mutex
	sock      *wsConn  // the socket that carries the connection; nil while none does
	kept      [][]byte // the last frames written, kept for a resume (resumable only)
	first     uint64   // the number of kept[0]
	next      uint64   // the number the next frame gets
	keptBytes int
	received  uint64        // the client's frames taken, initialize not counted
	initID    jsonrpc.ID    // initialize's id, whose answer advertises resumes
	waiting   chan struct{} // while no socket carries it: closed by the resume that takes it
	timedOut  bool          // awaitResume gave up on it
	// stale is a socket a resume took the connection from whose reader
	// has not stopped yet: the next resume waits for it too.
	stale *wsConn
	// taking is set while a resume takes the connection over, until it
	// carries it (resume) or gives it back: a second resume meanwhile is
	// refused, or both would answer for the connection, and release it
	// twice (the server's count of connections then off by one, a later
	// drain waits for ever).
	taking bool
}

func newWSOut(c *connection, window int, wait time.Duration) *wsOut {
	return &wsOut{c: c, window: window, wait: wait, first: 1, next: 1}
}

// Write is mm's way out: each message one text frame, numbered, kept for
// a resume, and written to the socket that carries the connection, if one
// does.
func (o *wsOut) Write(m jsonrpc.Out) error { return o.WriteBatch([]jsonrpc.Out{m}) }

// WriteBatch writes messages as Write does, corked together: the socket
// sends them in as few writes as it can.
func (o *wsOut) WriteBatch(outs []jsonrpc.Out) error {
	o.mu.Lock()
	t := o.sock
	if t != nil {
		t.sock.cork()
	}
	for _, m := range outs {
		line := m.Data
		if len(line) == 0 {
			continue
		}
		if m.Response && !o.initID.IsZero() && m.ID == o.initID {
			o.initID = jsonrpc.ID{}
			line = o.advertise(line)
		}
		o.keep(line)
		if t != nil {
			t.writeFrame(line)
		}
	}
	o.mu.Unlock()
	if t != nil {
		if err := t.sock.uncork(); err != nil {
			t.failed(err)
		}
	}
	return nil
}

// reply writes an answer of the transport's own on the connection, in its
// order and numbered as mm's are.
func (o *wsOut) reply(b []byte) { _ = o.Write(jsonrpc.Out{Data: b, Response: true}) }

// keep numbers a frame and, on a resumable connection, keeps it, dropping
// the oldest past the window. Called with mu held.
func (o *wsOut) keep(line []byte) {
	o.next++
	if !o.resumable.Load() {
		o.first = o.next
		return
	}
	o.kept = append(o.kept, bytes.Clone(line))
	o.keptBytes += len(line)
	for o.keptBytes > o.window && len(o.kept) > 0 {
		o.keptBytes -= len(o.kept[0])
		o.kept[0] = nil
		o.kept = o.kept[1:]
		o.first++
	}
}

// advertise adds to initialize's answer, the connection's first frame,
// that it can be resumed, its id and window: the initialize result's
// _meta["acp/transport"]. Called with mu held.
func (o *wsOut) advertise(line []byte) []byte {
	if !bytes.Contains(line, []byte(`"result":{`)) {
		return line
	}
	meta := fmt.Sprintf(`"_meta":{%q:{"resumable":true,"connectionId":%q,"windowBytes":%d}},`, transportMetaKey, o.c.id, o.window)
	i := bytes.Index(line, []byte(`"result":{`)) + len(`"result":{`)
	if bytes.HasPrefix(line[i:], []byte(`"_meta"`)) {
		return line // mm's own _meta there: left as it is
	}
	out := make([]byte, 0, len(line)+len(meta))
	out = append(out, line[:i]...)
	out = append(out, meta...)
	if line[i] == '}' {
		out = out[:len(out)-1] // an empty result: no comma after _meta
	}
	return append(out, line[i:]...)
}

// attach makes t the socket that carries the connection.
func (o *wsOut) attach(t *wsConn) {
	o.mu.Lock()
	o.sock = t
	o.mu.Unlock()
}

// initializing names initialize's request, whose answer says that the
// connection can be resumed.
func (o *wsOut) initializing(id jsonrpc.ID) {
	o.mu.Lock()
	o.initID = id
	o.mu.Unlock()
}

// makeResumable keeps the frames from now on (the client said it will
// resume), the first frame, initialize's answer, among them.
func (o *wsOut) makeResumable() {
	o.resumable.Store(true)
}

// took counts a client frame taken (not initialize).
func (o *wsOut) took() {
	o.mu.Lock()
	o.received++
	o.mu.Unlock()
}

// detach lets t's socket go without ending the connection, when the
// connection is resumable and the socket dropped (no close frame of the
// client's ending it on purpose): mm's side goes on, and awaitResume
// waits serve.resumeTimeout for the client to come back. It reports
// whether it did; the caller then neither ends nor releases the
// connection.
func (o *wsOut) detach(t *wsConn, onPurpose bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sock != t {
		return t.superseded // a resume took the connection from this socket
	}
	if !o.resumable.Load() || onPurpose || o.timedOut {
		return false
	}
	o.sock = nil
	o.waiting = make(chan struct{})
	go o.awaitResume(o.waiting)
	o.c.log.Info(fmt.Sprintf("[serve] websocket of %s dropped; the connection waits serve.resumeTimeout (%s) for a resume", o.c.client.Token, o.wait))
	return true
}

// awaitResume answers for a connection no socket carries: it ends it,
// and gives its place back, unless a resume takes it within
// serve.resumeTimeout (waiting is closed then).
func (o *wsOut) awaitResume(waiting chan struct{}) {
	timer := time.NewTimer(o.wait)
	defer timer.Stop()
	select {
	case <-waiting:
		return
	case <-timer.C:
	case <-o.c.endc:
	case <-o.c.done:
	}
	o.mu.Lock()
	if o.waiting != waiting {
		o.mu.Unlock()
		return // taken by a resume meanwhile
	}
	o.waiting = nil
	o.timedOut = true
	o.mu.Unlock()
	o.c.end(fmt.Sprintf("the client did not resume within serve.resumeTimeout (%s)", o.wait))
	<-o.c.done
	o.c.release()
}

// errResume is why a resume is refused, with its HTTP status.
type errResume struct {
	status int
	why    string
}

func (e *errResume) Error() string { return e.why }

// takeOver takes the connection for a resuming socket: from awaitResume,
// or from the socket that still carries it (a half-open one: the client
// gave up on it first), which is closed and whose reader is waited for, so
// that the count of frames taken is final. It returns the number of frames
// of the client's taken; until resume or giveBack, the resuming socket
// answers for the connection.
func (o *wsOut) takeOver(cursor uint64, within time.Duration) (uint64, error) {
	o.mu.Lock()
	ending := false
	select {
	case <-o.c.endc:
		ending = true
	default:
	}
	if o.timedOut || !o.resumable.Load() || ending {
		o.mu.Unlock()
		return 0, &errResume{http.StatusNotFound, "no such connection to resume"}
	}
	if o.taking {
		o.mu.Unlock()
		return 0, &errResume{http.StatusConflict, "another resume of the connection is under way"}
	}
	o.taking = true
	if old := o.sock; old != nil {
		old.superseded = true
		o.sock = nil
		o.stale = old
	}
	if stale := o.stale; stale != nil {
		o.mu.Unlock()
		// Its reader stops: its socket closes, and a wait for room or
		// for mm to take a message ends (what it had not handed over is
		// not counted taken: the client sends it again).
		stale.stop()
		_ = stale.ws.CloseNow()
		select {
		case <-stale.readDone:
		case <-time.After(within):
			// The connection stays someone's: it waits for another
			// resume, as one that no socket carries.
			o.mu.Lock()
			o.taking = false
			if o.waiting == nil && !o.timedOut {
				o.waiting = make(chan struct{})
				go o.awaitResume(o.waiting)
			}
			o.mu.Unlock()
			return 0, &errResume{http.StatusServiceUnavailable, "the connection's last socket is still being read"}
		}
		o.mu.Lock()
		if o.stale == stale {
			o.stale = nil
		}
	}
	if o.waiting != nil {
		close(o.waiting)
		o.waiting = nil
	}
	defer o.mu.Unlock()
	if cursor+1 < o.first || cursor >= o.next {
		// Taken, and given back at once: the client will not resume it.
		o.taking = false
		o.timedOut = o.sock == nil
		if o.timedOut {
			go func() { o.c.end("the client's resume came past serve.resumeWindowBytes"); <-o.c.done; o.c.release() }()
		}
		return 0, &errResume{http.StatusConflict, fmt.Sprintf("cannot resume after frame %d: mm holds frames %d to %d (serve.resumeWindowBytes)", cursor, o.first, o.next-1)}
	}
	return o.received, nil
}

// resume writes the frames after cursor to t, then makes t the socket that
// carries the connection: mm's next frames follow them.
func (o *wsOut) resume(t *wsConn, cursor uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t.sock.cork()
	for i := cursor + 1; i < o.next; i++ {
		t.writeFrame(o.kept[i-o.first])
	}
	if err := t.sock.uncork(); err != nil {
		go t.failed(err)
	}
	o.sock = t
	o.taking = false
}

// giveBack hands a connection taken for a resume whose upgrade failed back
// to awaitResume.
func (o *wsOut) giveBack() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.taking = false
	o.waiting = make(chan struct{})
	go o.awaitResume(o.waiting)
}

// resumeRequest reads a resume from an upgrade: the connection it names
// and its cursor; ok is false for an upgrade that opens a connection.
func resumeRequest(r *http.Request) (id string, cursor uint64, ok bool, err error) {
	id = r.Header.Get(headerConnectionID)
	last := r.Header.Get(headerLastEvent)
	if id == "" && last == "" {
		return "", 0, false, nil
	}
	if id == "" || last == "" {
		return "", 0, true, fmt.Errorf("a resume needs both %s and %s", headerConnectionID, headerLastEvent)
	}
	cursor, err = strconv.ParseUint(last, 10, 64)
	if err != nil {
		return "", 0, true, fmt.Errorf("%s %q is not a frame number", headerLastEvent, last)
	}
	return id, cursor, true, nil
}

// serveResume serves an upgrade that resumes connection id after frame
// cursor: found among this server's connections of the same token, taken
// over, and carried on by the new socket.
func (s *Server) serveResume(w http.ResponseWriter, r *http.Request, owner, id string, cursor uint64) {
	s.mu.Lock()
	var c *connection
	for k := range s.conns {
		if k.id == id && k.client.Token == owner && k.client.Transport == WebSocket && k.ws != nil {
			c = k
		}
	}
	draining := s.draining
	s.mu.Unlock()
	if c == nil || draining {
		s.metrics.refused.WithLabelValues("resume").Inc()
		text(w, http.StatusNotFound, "no such connection to resume: open a new one and load its sessions")
		return
	}
	received, err := c.ws.takeOver(cursor, s.o.MessageTimeout)
	if err != nil {
		e := err.(*errResume)
		s.metrics.refused.WithLabelValues("resume").Inc()
		text(w, e.status, e.why)
		return
	}
	w.Header().Set(headerConnectionID, c.id)
	w.Header().Set(headerReceived, strconv.FormatUint(received, 10))
	hj := &stallHijacker{ResponseWriter: w, stall: s.o.StallTimeout}
	ws, err := websocket.Accept(hj, r, acceptOptions(r))
	if err != nil {
		c.ws.giveBack()
		return
	}
	ws.SetReadLimit(-1)
	t := s.newWSConn(c, ws, hj.sock)
	t.connected = true
	c.ws.resume(t, cursor)
	c.log.Info(fmt.Sprintf("[serve] websocket of %s resumed after frame %d (%d of the client's taken)", owner, cursor, received))
	s.metrics.resumed.Inc()
	t.serve(true)
}

// isResumable may be called with mu held or not: a frame's write fails
// with it held (issue 42: it took mu again, and the connection's writer
// waited for itself for ever).
func (o *wsOut) isResumable() bool { return o.resumable.Load() }
