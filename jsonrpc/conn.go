package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is one JSON-RPC connection, either side: mm as an agent, mm as a
// client of another agent, mm connect, the stress harness. It reads the
// peer's messages from a Source, on one read loop (Run), each split once
// into its members by the framer; it checks each (an invalid message gets
// its error here, encoded in one place) and keeps the one table of the
// peer's requests in flight, by id, which bounds how many it reads before
// they are answered (the back-pressure: past Max, the read loop waits and
// the transport pushes back), and the one table of its own calls waiting
// for their answers.
//
// What it reads goes, in the order read, to Preempt first (a cancel: it
// must not wait for anything), then to the Handler, on the read loop: a
// request is answered later, by id (Respond, or Take and a write through
// the caller's own ordered writer), so that a handler never waits on the
// peer. A response goes to the call it answers.
//
// Concurrency: Run is called once; Respond, Take, Write, Call, Expect,
// Notify and the rest may be called from any goroutine.
type Conn struct {
	src  Source
	w    Writer
	opts Options

	wmu sync.Mutex // serializes writes, so that each message goes out whole

	mu   sync.Mutex
	cond *sync.Cond
	// incoming are the peer's requests read and not answered yet.
	incoming map[ID]Incoming
	// answering counts the requests taken for their answer (Take) whose
	// answer is not written yet (Written): they keep their places, so
	// that a peer that reads nothing has no more answers queued for it
	// than Max.
	answering int
	// outgoing are this side's calls waiting for their answers.
	outgoing map[ID]call
	next     uint64
	closed   bool
	answered uint64 // places given back, so that a drain tells progress
	done     chan struct{}
}

// Options configure a Conn.
type Options struct {
	// Handler serves the peer's requests and notifications not preempted.
	Handler Handler
	// Preempt, when set, sees each request and notification first, on the
	// read loop, before the request takes a place: it returns true for
	// one it has served (a cancel), which goes no further. It must not
	// block.
	Preempt func(*Request) bool
	// Max bounds the peer's requests read and not answered (at least 1).
	Max int
	// MaxLine and LimitName say the framer's size limit and the key that
	// sets it, for the answer to a message too long to read.
	MaxLine   int
	LimitName string
	// CallPrefix starts the ids of this side's calls ("mm-"); "" numbers
	// them.
	CallPrefix string
	// Log, when set, gets what the Conn drops (at debug level) and why a
	// stream ended.
	Log *slog.Logger
}

// Handler serves what the peer sends, one at a time, on the read loop, in
// the order read. It must not wait on the peer: a request is answered
// later, by its id.
type Handler interface {
	Serve(*Request)
}

// HandlerFunc is a Handler of a function.
type HandlerFunc func(*Request)

// Serve calls f.
func (f HandlerFunc) Serve(r *Request) { f(r) }

// Request is a request (ID set) or a notification (ID zero) of the peer's,
// checked: its method a non-empty string, its id a string or a number,
// its params a JSON object or array (or none) with no member twice.
type Request struct {
	ID     ID
	Method string
	Params json.RawMessage
	// Session is params.sessionId when it is a string.
	Session string
	// Tag is the transport's tag of the message (Message.Tag).
	Tag any
	// Seq is the process's number for a request (NextSeq), which its
	// answer names with its id (TakeSeq): a peer may use an id again once
	// it is answered, and a late answer to the first must not answer the
	// second.
	Seq uint64
}

// IsCall says whether r expects an answer.
func (r *Request) IsCall() bool { return !r.ID.IsZero() }

// Incoming is a request of the peer's in flight: what the Conn keeps of
// it until it is answered.
type Incoming struct {
	Method  string
	Session string
	Tag     any
	Seq     uint64
	// Note is what the handler keeps of the request while it is in flight
	// (Annotate): a prompt's turn, which $/cancel_request cancels.
	Note any
}

// seqs numbers the requests of every Conn of the process.
var seqs atomic.Uint64

// NextSeq is the process's next number for a request.
func NextSeq() uint64 { return seqs.Add(1) }

// Response is the answer to one of this side's calls.
type Response struct {
	Result json.RawMessage
	Error  *Error
}

// New makes a Conn reading src and writing w; Run serves it.
func New(src Source, w Writer, o Options) *Conn {
	if o.Max < 1 {
		o.Max = 1
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	c := &Conn{src: src, w: w, opts: o, incoming: map[ID]Incoming{}, outgoing: map[ID]call{}, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Run reads the peer's messages until its stream ends, serving each; it
// returns nil at the stream's end (io.EOF), or the error that ended it.
// The calls still waiting then get ErrClosed.
func (c *Conn) Run() error {
	defer c.Close()
	for {
		m, err := c.src.Next()
		switch {
		case m.TooLong > 0:
			c.writeError(ID{}, HeadID(m.Line), "", nil, ErrInvalidRequest.With(fmt.Sprintf(
				"the line is %d bytes, longer than %s (%s); it was skipped", m.TooLong, c.opts.LimitName, sizeOf(c.opts.MaxLine))))
		case m.Line != nil || m.Err != nil:
			c.route(&m)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// route checks one message and hands it on.
func (c *Conn) route(m *Message) {
	if err := m.Err; err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			c.writeError(ID{}, nil, "", m.Tag, ErrParse.With("the line is not valid JSON: "+err.Error()))
		} else {
			c.writeError(ID{}, nil, "", m.Tag, ErrInvalidRequest.With("a JSON-RPC message is a JSON object"))
		}
		return
	}
	raw := m.ID
	if raw != nil && !ValidID(raw) {
		c.writeError(ID{}, nil, "", m.Tag, ErrInvalidRequest.With("id must be a string, a number or null"))
		return
	}
	if m.Twice {
		if m.Dup == "id" {
			raw = nil // which one?
		}
		c.writeError(ID{}, raw, "", m.Tag, ErrInvalidRequest.With(fmt.Sprintf("the member %q appears twice in the message", m.Dup)))
		return
	}
	if m.JSONRPC != nil && string(m.JSONRPC) != `"2.0"` {
		c.writeError(ID{}, raw, "", m.Tag, ErrInvalidRequest.With(`jsonrpc must be "2.0"`))
		return
	}
	id, hasID := IDOf(raw)
	if m.Method == nil {
		switch {
		case raw != nil && (m.Result != nil || m.Error != nil):
			if !hasID {
				// A response to no request of ours (the peer's answer to a
				// line it could not read): nothing waits for it.
				c.opts.Log.Debug("[jsonrpc] a response with a null id ignored")
				return
			}
			if !c.answer(id, m.Result, m.Error) {
				c.opts.Log.Debug(fmt.Sprintf("[jsonrpc] a response to no request of this side's ignored (id %s)", id))
			}
		default:
			c.writeError(ID{}, raw, "", m.Tag, ErrInvalidRequest.With("a request needs a method, a response a result or an error"))
		}
		return
	}
	method, ok := plainString(m.Method)
	if !ok && (m.Method[0] != '"' || json.Unmarshal(m.Method, &method) != nil) || method == "" {
		c.writeError(ID{}, raw, "", m.Tag, ErrInvalidRequest.With("method must be a non-empty string"))
		return
	}
	session, dup, twice, read := m.paramsRead()
	if !read {
		session, dup, twice = scanParams(m.Params)
	}
	if twice {
		c.writeError(ID{}, raw, "", m.Tag, ErrInvalidRequest.With(fmt.Sprintf("the member %q appears twice in params", dup)))
		return
	}
	if raw != nil && !hasID {
		// JSON-RPC 2.0 allows a null id and advises against it: no answer
		// could name its request.
		c.writeError(ID{}, raw, "", m.Tag, ErrInvalidRequest.Data(map[string]any{"method": method,
			"error": "a request's id must be a string or a number: with a null id no answer could name its request"}))
		return
	}
	r := &Request{ID: id, Method: method, Params: m.Params, Session: session, Tag: m.Tag}
	if c.opts.Preempt != nil && c.opts.Preempt(r) {
		return
	}
	if r.IsCall() {
		if err := c.accept(r); err != nil {
			c.writeError(ID{}, raw, "", m.Tag, err)
			return
		}
	}
	if c.opts.Handler != nil {
		c.opts.Handler.Serve(r)
	} else if r.IsCall() {
		c.Respond(r.ID, nil, ErrMethodNotFound.Data(map[string]any{"method": r.Method}))
	}
}

// accept takes a place in the table for r, waiting while it is full: the
// read loop stops reading, and the peer is pushed back. A Source that can
// tell the peer's stream has ended without being read (Ended: serve's
// transports) ends the wait: the requests that hold the places may wait for
// an answer of the peer's that will never be read, and r is then refused.
func (c *Conn) accept(r *Request) *Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight() >= c.opts.Max && !c.closed {
		if e, ok := c.src.(interface{ Ended() <-chan struct{} }); ok {
			ended := e.Ended()
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				select {
				case <-ended:
					c.mu.Lock()
					c.cond.Broadcast()
					c.mu.Unlock()
				case <-stop:
				}
			}()
			for c.inFlight() >= c.opts.Max && !c.closed {
				select {
				case <-ended:
					return Internal("the connection ended before this request could be served", map[string]any{"method": r.Method})
				default:
				}
				c.cond.Wait()
			}
		}
	}
	for c.inFlight() >= c.opts.Max && !c.closed {
		c.cond.Wait()
	}
	if _, dup := c.incoming[r.ID]; dup {
		return ErrInvalidRequest.With(fmt.Sprintf("the id %s is the id of a request not answered yet", r.ID))
	}
	r.Seq = NextSeq()
	c.incoming[r.ID] = Incoming{Method: r.Method, Session: r.Session, Tag: r.Tag, Seq: r.Seq}
	return nil
}

// Annotate keeps note with the request id of number seq while it is in
// flight; false when it is not (answered already).
func (c *Conn) Annotate(id ID, seq uint64, note any) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.incoming[id]
	if !ok || in.Seq != seq {
		return false
	}
	in.Note = note
	c.incoming[id] = in
	return true
}

// inFlight is the places taken: requests not answered, and answers not
// written. c.mu is held.
func (c *Conn) inFlight() int { return len(c.incoming) + c.answering }

// Take takes the request id out of the table, for its answer: true the
// first time only, so that a request is answered once whoever answers it.
// Its place stays taken until its answer is written: the caller writes it
// (Write), then says so (Written).
func (c *Conn) Take(id ID) (Incoming, bool) { return c.TakeSeq(id, 0) }

// Written gives back the places of n answers taken and now written.
func (c *Conn) Written(n int) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	c.answering = max(0, c.answering-n)
	c.answered += uint64(n)
	c.mu.Unlock()
	c.cond.Broadcast()
}

// TakeSeq is Take for the request of number seq only (0: whichever has
// the id).
func (c *Conn) TakeSeq(id ID, seq uint64) (Incoming, bool) {
	c.mu.Lock()
	in, ok := c.incoming[id]
	if ok && seq != 0 && in.Seq != seq {
		ok = false
	}
	if ok {
		delete(c.incoming, id)
		c.answering++
	}
	c.mu.Unlock()
	return in, ok
}

// Respond answers the peer's request id with result, or with err when it
// is not nil; false when the request was answered already (or never read).
func (c *Conn) Respond(id ID, result any, err *Error) bool {
	in, ok := c.Take(id)
	if !ok {
		return false
	}
	data, encErr := EncodeResponse(id, result, err)
	if encErr != nil {
		data, _ = EncodeResponse(id, nil, Internal("the answer could not be encoded: "+encErr.Error(), nil))
	}
	_ = c.Write(Out{Data: data, Response: true, ID: id, Session: in.Session, Tag: in.Tag, Method: in.Method})
	c.Written(1)
	return true
}

// Pending is the number of the peer's requests read whose answer is not
// written yet.
func (c *Conn) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight()
}

// Write writes one message, whole (the writes of all goroutines are
// serialized).
func (c *Conn) Write(o Out) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.w.Write(o)
}

// WriteBatch writes messages in order, in one write where the Writer can
// (a BatchWriter: a stream of lines), each whole.
func (c *Conn) WriteBatch(outs []Out) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if bw, ok := c.w.(BatchWriter); ok {
		return bw.WriteBatch(outs)
	}
	for _, o := range outs {
		if err := c.w.Write(o); err != nil {
			return err
		}
	}
	return nil
}

// writeError answers a message that goes no further: rawID when it had a
// usable id (nil: null).
func (c *Conn) writeError(id ID, rawID json.RawMessage, session string, tag any, e *Error) {
	if id.IsZero() && rawID != nil {
		id, _ = IDOf(rawID)
	}
	data, err := EncodeResponse(id, nil, e)
	if err != nil {
		return
	}
	_ = c.Write(Out{Data: data, Response: true, ID: id, Session: session, Tag: tag})
}

// call is one of this side's calls waiting for its answer: where the
// answer goes, and the session the call is about ("" for the
// connection's), which a transport checks the answer against.
type call struct {
	ch      chan Response
	session string
	// note is what the caller keeps with the call (ExpectNoted), and
	// abandon is closed when the caller gives it up by its note (Abandon).
	note    any
	abandon chan struct{}
}

// Expect registers a call of this side's about session: its id, and wait, which returns
// its answer (a Response with an Error for the peer's error), ctx's error
// (the call given up: the peer is told with $/cancel_request when cancel
// is true), or ErrClosed. The caller writes the request itself (Encode),
// where it must go in order with what else it writes.
func (c *Conn) Expect(session string) (id ID, wait func(ctx context.Context) (Response, error)) {
	id, ch := c.await(session, call{})
	return id, c.waiter(id, ch, nil)
}

// Go writes a request of method with params now, in order with what is
// written next, and returns its id and the wait for its answer (Expect's).
func (c *Conn) Go(method string, params any, session string) (id ID, wait func(ctx context.Context) (Response, error), err error) {
	id, wait = c.Expect(session)
	data, err := EncodeRequest(id, method, params)
	if err == nil {
		err = c.Write(Out{Data: data, ID: id, Session: session, Method: method})
	}
	if err != nil {
		c.forget(id)
		return ID{}, nil, err
	}
	return id, wait, nil
}

// Call calls method with params and waits for its answer: its result, the
// peer's error (a *Error), ctx's error (the peer is told with
// $/cancel_request) or ErrClosed.
func (c *Conn) Call(ctx context.Context, method string, params any, session string) (json.RawMessage, error) {
	id, wait, err := c.Go(method, params, session)
	if err != nil {
		return nil, err
	}
	r, err := wait(ctx)
	if err != nil {
		if ctx.Err() != nil {
			_ = c.Notify("$/cancel_request", map[string]any{"requestId": id}, session)
		}
		return nil, err
	}
	if r.Error != nil {
		return nil, r.Error
	}
	return r.Result, nil
}

// forget drops a call that never went out.
func (c *Conn) forget(id ID) {
	c.mu.Lock()
	delete(c.outgoing, id)
	c.mu.Unlock()
}

// Notify sends a notification.
func (c *Conn) Notify(method string, params any, session string) error {
	data, err := EncodeRequest(ID{}, method, params)
	if err != nil {
		return err
	}
	return c.Write(Out{Data: data, Session: session, Method: method})
}

// answer delivers a response to the call it answers: false when none
// waits for it.
func (c *Conn) answer(id ID, result, rerr json.RawMessage) bool {
	c.mu.Lock()
	w, ok := c.outgoing[id]
	delete(c.outgoing, id)
	c.mu.Unlock()
	if !ok {
		return false
	}
	ch := w.ch
	r := Response{Result: result}
	if rerr != nil {
		r.Error = &Error{}
		if json.Unmarshal(rerr, r.Error) != nil {
			r.Error = Internal("the peer's error could not be read", nil)
		}
	}
	ch <- r
	return true
}

// Close gives every call still waiting ErrClosed, and lets a read loop
// waiting for a place through; it does not close the transport. Done is
// closed first: a call that got ErrClosed finds the Conn done.
func (c *Conn) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
		for id, w := range c.outgoing {
			close(w.ch)
			delete(c.outgoing, id)
		}
	}
	c.mu.Unlock()
	c.cond.Broadcast()
}

// Done is closed once the Conn is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// How a Drain ended.
const (
	DrainDone   = iota // every request read was answered
	DrainStuck         // the peer stopped reading
	DrainSilent        // no answer went out for the wait's hang bound
)

// Drain waits until every request read has been answered. It gives up when
// stuck says the peer has stopped reading, asked each time a second
// passes without an answer, or when no answer went out for hang.
func (c *Conn) Drain(stuck func() bool, hang time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	quiet := time.Duration(0)
	for c.inFlight() > 0 {
		if c.waitProgress(c.answered, time.Second) {
			quiet = 0
			continue
		}
		if stuck() {
			return DrainStuck
		}
		if quiet += time.Second; quiet >= hang {
			return DrainSilent
		}
	}
	return DrainDone
}

// waitProgress waits up to idle for an answer after seen; c.mu is held.
func (c *Conn) waitProgress(seen uint64, idle time.Duration) bool {
	deadline := time.Now().Add(idle)
	for c.inFlight() > 0 && c.answered == seen {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		t := time.AfterFunc(left, func() {
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
		})
		c.cond.Wait()
		t.Stop()
	}
	return true
}

// plainString is the JSON string raw (valid JSON, as Parse checked) when
// it has no escape in it: its bytes between the quotes, without a decode.
func plainString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c == '\\' || c == '"' || c < 0x20 || c >= 0x80 {
			return "", false
		}
	}
	return string(body), true
}
