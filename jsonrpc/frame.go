package jsonrpc

import (
	"context"
	"errors"
	"io"
	"sync"
)

// The framing seam: how messages cross a transport. A Conn reads messages
// from a Source (message.go: each split once into its members, a message
// too long to read marked TooLong with its first bytes, so that the Conn
// answers it) and writes them to a Writer, and never sees bytes it must
// split or frame; a transport is one Source and one Writer (Lines over a
// byte stream: stdio, mm connect's editor side, mmstress, an asked agent;
// serve's WebSocket text frames; serve's streamable HTTP, POST bodies in
// and SSE events out).

// Writer takes the Conn's messages out, whole, in the order written: each
// Out is one message, already encoded. It is called by one goroutine at a
// time (the Conn serializes its writes).
type Writer interface {
	Write(Out) error
}

// BatchWriter is a Writer that takes several messages in one write (a
// stream of lines), in order, each whole.
type BatchWriter interface {
	WriteBatch([]Out) error
}

// Out is a message on its way out, encoded, with what a transport needs
// to know of it without reading it again: whether it answers a request of
// the peer's, its id, its session, and the tag of the request it answers
// (the transport's own, given with the request: a streamable HTTP POST's
// stream).
type Out struct {
	// Data is the message's JSON, without a line end.
	Data []byte
	// Response says it answers a request the peer sent (ID is that
	// request's); otherwise it is mm's request (ID set) or a notification.
	Response bool
	ID       ID
	// Session is the session the message is about: a notification's or a
	// request's params.sessionId, or the session of the request a
	// response answers; "" for the connection's own.
	Session string
	// Tag is the Tag of the request a response answers (Message.Tag).
	Tag any
	// Method is the message's method, or that of the request a response
	// answers.
	Method string
}

// LineFramer is the framing of newline-delimited JSON on a byte stream:
// each message is one line of r, of max bytes at most (a longer one is read
// to its end and skipped, and the Conn answers it with the one "line too
// long" error); each Out is written to w as one line.
func LineFramer(r io.Reader, w io.Writer, max int) (Source, *LineWriter) {
	return Lines(r, max), &LineWriter{w: w}
}

// LineWriter writes each Out as one line of its stream. Its lock keeps
// every line whole, whoever else writes through it.
type LineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewLineWriter writes lines to w.
func NewLineWriter(w io.Writer) *LineWriter { return &LineWriter{w: w} }

// WriteBatch writes each message as a line, all in one write.
func (f *LineWriter) WriteBatch(outs []Out) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf = f.buf[:0]
	for _, o := range outs {
		f.buf = append(append(f.buf, o.Data...), '\n')
	}
	_, err := f.w.Write(f.buf)
	if cap(f.buf) > 1<<20 {
		f.buf = nil
	}
	return err
}

// Write writes o's message as one line.
func (f *LineWriter) Write(o Out) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf = append(append(f.buf[:0], o.Data...), '\n')
	_, err := f.w.Write(f.buf)
	if cap(f.buf) > 1<<20 {
		f.buf = nil // one large message: not kept for good
	}
	return err
}

// ErrClosed is what a Conn's calls answer once it is closed, and what Put
// returns once the source is closed.
var ErrClosed = errors.New("the connection is closed")

// chanReader is a Source fed by a transport that receives its messages
// elsewhere (a WebSocket's frames, streamable HTTP's POST bodies): Put
// hands one over, waiting while the Conn has not taken the last one, so
// that a peer that writes faster than mm reads is pushed back; Close ends
// the stream.
type chanReader struct {
	c    chan Message
	done chan struct{}
	once sync.Once
}

// NewChanReader is a Source to which a transport hands messages with Put.
func NewChanReader() *ChanReader {
	return &ChanReader{chanReader{c: make(chan Message), done: make(chan struct{})}}
}

// ChanReader is NewChanReader's Source.
type ChanReader struct{ chanReader }

// Next returns the next message handed over, or io.EOF once closed and
// drained.
func (r *ChanReader) Next() (Message, error) {
	select {
	case m := <-r.c:
		return m, nil
	case <-r.done:
		select {
		case m := <-r.c:
			return m, nil
		default:
			return Message{}, io.EOF
		}
	}
}

// Put hands m to the Conn, waiting until it is taken, ctx ends or the
// source is closed.
func (r *ChanReader) Put(ctx context.Context, m Message) error {
	select {
	case r.c <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrClosed
	}
}

// Close ends the stream: Read returns io.EOF once what was handed over is
// taken.
func (r *ChanReader) Close() { r.once.Do(func() { close(r.done) }) }
