package serve

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// A WebSocket's socket, written with a deadline per piece: a client that
// reads nothing for serve.stallTimeout makes mm's write fail.

// stallHijacker hands the WebSocket library a connection whose writes
// fail once the client has taken nothing for the stall timeout.
type stallHijacker struct {
	http.ResponseWriter
	stall time.Duration
	sock  *stallConn // once hijacked
}

func (h *stallHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.sock = &stallConn{Conn: conn, stall: h.stall}
	return h.sock, bufio.NewReadWriter(brw.Reader, bufio.NewWriter(h.sock)), nil
}

// stallConn writes in pieces, each with a deadline of the stall timeout
// from its start: a client that reads, however slowly, keeps its socket;
// one that reads nothing for that long makes the write fail. The kernel's
// socket buffers are what waits for the client, besides the frame being
// written.
//
// Corked (cork, uncork), it keeps what it is given and writes it all at
// uncork. mu makes each write whole: the library's own frames (a pong, a
// close) wait for a batch being written, or join it.
type stallConn struct {
	net.Conn
	stall time.Duration

	mu     sync.Mutex
	corked bool
	held   []byte
}

// stallPiece is the most written under one deadline.
const stallPiece = 32 << 10

func (c *stallConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.write(p)
}

// cork holds the writes until uncork.
func (c *stallConn) cork() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork writes what was held, in one write.
func (c *stallConn) uncork() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	_, err := c.write(c.held)
	if cap(c.held) > 1<<20 {
		c.held = nil // a burst's buffer is not kept
	} else {
		c.held = c.held[:0]
	}
	return err
}

func (c *stallConn) write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		piece := p[:min(len(p), stallPiece)]
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.stall))
		m, err := c.Conn.Write(piece)
		n += m
		p = p[m:]
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
