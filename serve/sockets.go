package serve

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"sync"
)

// sockets bounds the TCP connections that no request with a known token
// has come on yet: at most serve.maxConnections of them, the oldest closed
// when a new one would pass that. Each holds a descriptor and a goroutine,
// and costs a stranger nothing to open (issue 28: 21,000 redialled ones
// held 12,431 descriptors and 9,980 goroutines); closing the oldest, not
// refusing the newest, keeps a flood from locking out a client that
// connects and speaks at once. A request refused (401, 403) closes its
// socket after its answer.
type sockets struct {
	max int

	mu     sync.Mutex
	unseen *list.List // of net.Conn, oldest first
	byConn map[net.Conn]*list.Element
}

func newSockets(max int) *sockets {
	return &sockets{max: max, unseen: list.New(), byConn: map[net.Conn]*list.Element{}}
}

type socketKey struct{}

// accept is the server's ConnContext: a new socket is unproven, and the
// oldest unproven one goes when there are too many.
func (s *sockets) accept(ctx context.Context, c net.Conn) context.Context {
	s.mu.Lock()
	var oldest net.Conn
	if s.unseen.Len() >= s.max {
		e := s.unseen.Front()
		oldest = e.Value.(net.Conn)
		s.unseen.Remove(e)
		delete(s.byConn, oldest)
	}
	s.byConn[c] = s.unseen.PushBack(c)
	s.mu.Unlock()
	if oldest != nil {
		_ = oldest.Close()
	}
	return context.WithValue(ctx, socketKey{}, c)
}

// state is the server's ConnState: a socket closed, or taken by a
// WebSocket, is counted no more.
func (s *sockets) state(c net.Conn, st http.ConnState) {
	if st == http.StateClosed || st == http.StateHijacked {
		s.forget(c)
	}
}

// proven records that a request with a known token came on the socket of
// ctx: it is a client's, not counted among the unproven.
func (s *sockets) proven(ctx context.Context) {
	if c, ok := ctx.Value(socketKey{}).(net.Conn); ok {
		s.forget(c)
	}
}

func (s *sockets) forget(c net.Conn) {
	s.mu.Lock()
	if e, ok := s.byConn[c]; ok {
		s.unseen.Remove(e)
		delete(s.byConn, c)
	}
	s.mu.Unlock()
}
