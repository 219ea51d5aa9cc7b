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
// Concurrency: Send and Close may be called from any goroutine; Next from
// one (mm's reader).
type inbox struct {
	msgs   chan jsonrpc.Message
	closed chan struct{}
	once   sync.Once
}

func newInbox() *inbox {
	return &inbox{msgs: make(chan jsonrpc.Message), closed: make(chan struct{})}
}

// Send gives mm one message. It returns once mm has taken it, or fails
// when ctx ends or the inbox is closed.
func (p *inbox) Send(ctx context.Context, m jsonrpc.Message) error {
	select {
	case <-p.closed:
		return errClosed
	default:
	}
	select {
	case p.msgs <- m:
		return nil
	case <-p.closed:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Next gives mm the messages, then io.EOF once the inbox is closed.
func (p *inbox) Next() (jsonrpc.Message, error) {
	select {
	case m := <-p.msgs:
		return m, nil
	case <-p.closed:
		return jsonrpc.Message{}, io.EOF
	}
}

// Ended is closed once the stream has ended: mm's ingress, waiting with a
// message it cannot serve yet, stops waiting.
func (p *inbox) Ended() <-chan struct{} { return p.closed }

// Close ends the stream: mm reads EOF, as when an editor closes stdin.
func (p *inbox) Close() { p.once.Do(func() { close(p.closed) }) }
