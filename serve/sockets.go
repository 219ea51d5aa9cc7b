package serve

import (
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// sockets bounds the TCP connections that no request with a known token
// has come on yet: at most serve.maxConnections of them. Each holds a
// descriptor and a goroutine, and costs a stranger nothing to open (issue
// 28: 21,000 redialled ones held 12,431 descriptors and 9,980 goroutines);
// past the bound a new one closes an old one rather than being refused,
// so that a flood does not lock out a client that connects and speaks at
// once. The one closed is the oldest that has sent nothing — its client
// has not spoken, the bytes it sent are not waiting to be read — and only
// when every one has spoken, the oldest of all: a client that sends its
// request promptly is not the one closed to make room for a flood of
// silent sockets (issue 42: 3 of 8 clients were reset during a flood of
// 6,000, "oldest" as they were). A request refused (401, 403) closes its
// socket after its answer.
type sockets struct {
	max int

	mu     sync.Mutex
	unseen *list.List // of *sockConn, oldest first
	byConn map[*sockConn]*list.Element
}

func newSockets(max int) *sockets {
	return &sockets{max: max, unseen: list.New(), byConn: map[*sockConn]*list.Element{}}
}

// listener wraps the server's listener: each socket says whether its
// client has sent anything.
type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sockConn{Conn: c}, nil
}

// sockConn is an accepted socket that notes its client's first bytes.
type sockConn struct {
	net.Conn
	spoke atomic.Bool
}

func (c *sockConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.spoke.Load() {
		c.spoke.Store(true)
	}
	return n, err
}

// CloseWrite half-closes the socket, as the server does to a TCP
// connection it ends after an answer.
func (c *sockConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// silent says whether the client has sent nothing yet: it has not been
// read from, and nothing it sent waits to be read (the server may not have
// got to reading it yet: waiting peeks at the socket). A socket whose
// client has closed it is silent.
func (c *sockConn) silent() bool {
	if c.spoke.Load() {
		return false
	}
	if waiting(c.Conn) {
		c.spoke.Store(true)
		return false
	}
	return true
}

// socketOf is the socket under c: the server's own, or under its TLS.
func socketOf(c net.Conn) *sockConn {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	s, _ := c.(*sockConn)
	return s
}

type socketKey struct{}

// accept is the server's ConnContext: a new socket is unproven, and one
// goes when there are too many (the oldest silent one, else the oldest).
func (s *sockets) accept(ctx context.Context, c net.Conn) context.Context {
	sc := socketOf(c)
	if sc == nil {
		return ctx
	}
	s.mu.Lock()
	var victim *sockConn
	if s.unseen.Len() >= s.max {
		e := s.unseen.Front()
		for f := e; f != nil; f = f.Next() {
			if f.Value.(*sockConn).silent() {
				e = f
				break
			}
		}
		victim = e.Value.(*sockConn)
		s.unseen.Remove(e)
		delete(s.byConn, victim)
	}
	s.byConn[sc] = s.unseen.PushBack(sc)
	s.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
	}
	return context.WithValue(ctx, socketKey{}, sc)
}

// state is the server's ConnState: a socket closed, or taken by a
// WebSocket, is counted no more.
func (s *sockets) state(c net.Conn, st http.ConnState) {
	if st == http.StateClosed || st == http.StateHijacked {
		if sc := socketOf(c); sc != nil {
			s.forget(sc)
		}
	}
}

// proven records that a request with a known token came on the socket of
// ctx: it is a client's, not counted among the unproven.
func (s *sockets) proven(ctx context.Context) {
	if c, ok := ctx.Value(socketKey{}).(*sockConn); ok {
		s.forget(c)
	}
}

func (s *sockets) forget(c *sockConn) {
	s.mu.Lock()
	if e, ok := s.byConn[c]; ok {
		s.unseen.Remove(e)
		delete(s.byConn, c)
	}
	s.mu.Unlock()
}
