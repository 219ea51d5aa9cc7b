package serve

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/mm-agent/mm/jsonrpc"
)

// errClosed is a send to a connection that has ended.
var errClosed = errors.New("the connection has ended")

// inbox is the stream of a connection's client's messages to mm: the `in`
// of Connector.Connect, a jsonrpc.Source. Each message comes parsed, as
// the transport parsed it to route it, so mm's ingress does not parse it
// again. The inbox holds no message of its own: Send hands one over only
// when mm's ingress reads, so a client that writes faster than mm reads
// (mm waits when acp.maxPending requests are unanswered) waits in Send,
// which stops the transport reading its socket or answering its POST: the
// push back is the same as a pipe's on stdio.
//
// A message comes with its room in the server's (incoming.go), which it
// holds while mm's ingress serves it: mm's ingress reads the next message
// once it has answered this one or handed it on, decoded, so Next gives
// the room of the message before back (and so does the connection's end).
//
// Concurrency: Send and Close may be called from any goroutine; Next from
// one (mm's reader); done once the connection is over.
type inbox struct {
	msgs   chan held
	closed chan struct{}
	once   sync.Once

	mu   sync.Mutex
	last *hold // the room of the message mm's reader took last
	over bool  // mm's reader is done: what it takes holds no room
}

// held is a message and its room.
type held struct {
	m    jsonrpc.Message
	hold *hold
}

func newInbox() *inbox {
	return &inbox{msgs: make(chan held), closed: make(chan struct{})}
}

// Send gives mm one message, with its room h (nil: none), which mm's side
// owns once Send succeeds. It returns once mm has taken it, or fails when
// ctx ends or the inbox is closed: the caller then still owns h.
func (p *inbox) Send(ctx context.Context, m jsonrpc.Message, h *hold) error {
	select {
	case <-p.closed:
		return errClosed
	default:
	}
	select {
	case p.msgs <- held{m, h}:
		return nil
	case <-p.closed:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Next gives mm the messages, then io.EOF once the inbox is closed. mm
// is done with the message it took before: its room is given back.
func (p *inbox) Next() (jsonrpc.Message, error) {
	p.drop()
	select {
	case m := <-p.msgs:
		p.mu.Lock()
		p.last = m.hold
		p.mu.Unlock()
		if p.isOver() {
			p.drop()
		}
		return m.m, nil
	case <-p.closed:
		return jsonrpc.Message{}, io.EOF
	}
}

// drop gives back the room of the message mm took last: mm asks for the
// next one.
func (p *inbox) drop() {
	p.mu.Lock()
	h := p.last
	p.last = nil
	p.mu.Unlock()
	h.release()
}

// done gives back the room of what mm took last, and of anything it
// takes after: the connection is over.
func (p *inbox) done() {
	p.mu.Lock()
	p.over = true
	p.mu.Unlock()
	p.drop()
}

func (p *inbox) isOver() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.over
}

// Ended is closed once the stream has ended: mm's ingress, waiting with a
// message it cannot serve yet, stops waiting.
func (p *inbox) Ended() <-chan struct{} { return p.closed }

// Close ends the stream: mm reads EOF, as when an editor closes stdin.
func (p *inbox) Close() { p.once.Do(func() { close(p.closed) }) }
