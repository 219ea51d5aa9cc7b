package serve

import (
	"context"
	"errors"
	"io"
	"sync"
)

// errClosed is a send to a connection that has ended.
var errClosed = errors.New("the connection has ended")

// inbox is the line stream a connection's client writes to mm: the `in` of
// Connector.Connect. It holds no message of its own: Send hands a line over
// only when mm's ingress reads, so a client that writes faster than mm
// reads (mm waits when acp.maxPending requests are unanswered) waits in
// Send, which stops the transport reading its socket or answering its
// POST: the push back is the same as a pipe's on stdio.
//
// Concurrency: Send and Close may be called from any goroutine; Read from
// one (mm's reader).
type inbox struct {
	lines  chan []byte
	closed chan struct{}
	once   sync.Once
	cur    []byte // the line being read; Read's goroutine only
}

func newInbox() *inbox {
	return &inbox{lines: make(chan []byte), closed: make(chan struct{})}
}

// Send gives mm one message as one line; line has no newline, and its
// spare capacity is the inbox's to use (the newline goes there, not into a
// copy). It returns once mm has taken it, or fails when ctx ends or the
// inbox is closed.
func (p *inbox) Send(ctx context.Context, line []byte) error {
	select {
	case <-p.closed:
		return errClosed
	default:
	}
	select {
	case p.lines <- append(line, '\n'):
		return nil
	case <-p.closed:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Read gives mm the lines, then io.EOF once the inbox is closed.
func (p *inbox) Read(b []byte) (int, error) {
	if len(p.cur) == 0 {
		select {
		case p.cur = <-p.lines:
		case <-p.closed:
			return 0, io.EOF
		}
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// Close ends the stream: mm reads EOF, as when an editor closes stdin.
func (p *inbox) Close() { p.once.Do(func() { close(p.closed) }) }
