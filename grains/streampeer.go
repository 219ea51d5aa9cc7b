package grains

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
)

// The dialing side of the stream (stream.go): a node's connection to
// another node's stream, and its writer.

// peer is the connection to the stream at addr, dialed on first use,
// and waited for. A peer whose connection broke is dialed again by the
// next link to its node; one that could not be dialed, not before
// streamRedial.
func (s *stream) peer(addr string) (*streamPeer, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("this node's stream is closed")
	}
	p := s.peers[addr]
	if p == nil || p.stale() {
		p = &streamPeer{s: s, addr: addr, ready: make(chan struct{})}
		s.peers[addr] = p
		go p.dial()
	}
	s.mu.Unlock()
	<-p.ready
	if p.err != nil {
		return nil, p.err
	}
	return p, nil
}

// peerNow is the connection to the stream at addr if it is up, without
// waiting: nil while it is being dialed (it is, from now), or could not
// be. A prompt sent straight goes through the remote meanwhile.
func (s *stream) peerNow(addr string) *streamPeer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	p := s.peers[addr]
	if p == nil || p.stale() {
		p = &streamPeer{s: s, addr: addr, ready: make(chan struct{})}
		s.peers[addr] = p
		go p.dial()
		return nil
	}
	select {
	case <-p.ready:
		if p.err != nil {
			return nil
		}
		return p
	default:
		return nil
	}
}

// streamRedial is how long a node whose stream could not be dialed is
// written to through the remote before a new link dials it again.
const streamRedial = 30 * time.Second

// stale says whether a new link dials again: the connection broke, or
// its dial failed streamRedial ago.
func (p *streamPeer) stale() bool {
	select {
	case <-p.ready:
	default:
		return false // being dialed
	}
	if p.err != nil {
		return time.Since(p.at) > streamRedial
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed != nil
}

// streamPeer is one connection to another node's stream. A sender
// appends its frame to what waits and wakes the peer's writer (write)
// unless it is writing: the sender never waits on the socket, and under
// load one write carries the frames of many senders.
type streamPeer struct {
	s     *stream
	addr  string
	ready chan struct{} // closed once dialed (err says how)
	err   error         // the dial's; read after ready
	at    time.Time     // when the dial ended

	conn net.Conn
	// wake (cap 1) wakes the writer (write) when frames wait and it
	// does not write; quit, closed by broke, ends it; done is closed
	// when it has returned.
	wake, quit, done chan struct{}

	mu      sync.Mutex
	pending []byte
	writing bool  // the writer is woken or writing: it sees what waits
	failed  error // the connection broke: sends fail
	// closedConn: broke has closed conn (once).
	closedConn bool
}

// dial connects to the peer's stream, with the cluster's TLS, within
// streamDial.
func (p *streamPeer) dial() {
	defer close(p.ready)
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: streamDial}, Config: p.s.client}
	c, err := d.Dial("tcp", p.addr)
	p.at = time.Now()
	if err != nil {
		p.err = err
		p.s.log.Warn(fmt.Sprintf("cluster: the stream of the node at %s cannot be reached (%v): its clients' output goes through the remote, for %s", p.addr, err, streamRedial))
		return
	}
	p.conn = c
	p.wake, p.quit, p.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go p.write()
}

// streamQueue bounds what waits for a peer's writer: past it the peer
// is taken as one that reads too slowly, and its connection is given up
// as when a write waits cluster.failureTimeout. Links' credits bound
// what each session has on its way; this bounds them all, whatever the
// timeout.
const streamQueue = 32 << 20

// streamDial bounds a dial, the TLS handshake included: a link's first
// Outs waits for it.
const streamDial = 2 * time.Second

func (s *stream) forget(p *streamPeer) {
	s.mu.Lock()
	if s.peers[p.addr] == p {
		delete(s.peers, p.addr)
	}
	s.mu.Unlock()
}

// send puts m, a frame of kind for the edge or actor of PID id there,
// in what the peer's writer writes next. An error says the connection
// broke: what it had not written is lost, and its senders go through
// the remote.
func (p *streamPeer) send(kind byte, id string, m proto.Message) error {
	if len(id) > 255 {
		return fmt.Errorf("an edge's id of %d bytes", len(id))
	}
	size := proto.Size(m)
	if 2+len(id)+size > streamFrame {
		return fmt.Errorf("a frame of %d bytes", 2+len(id)+size)
	}
	p.mu.Lock()
	if p.failed != nil {
		p.mu.Unlock()
		return p.failed
	}
	at := len(p.pending)
	p.pending = binary.BigEndian.AppendUint32(p.pending, uint32(2+len(id)+size))
	p.pending = append(p.pending, kind, byte(len(id)))
	p.pending = append(p.pending, id...)
	var err error
	if p.pending, err = (proto.MarshalOptions{}).MarshalAppend(p.pending, m); err != nil || len(p.pending)-at != 6+len(id)+size {
		p.pending = p.pending[:at]
		p.mu.Unlock()
		return fmt.Errorf("a %T that does not encode as sized: %v", m, err)
	}
	if len(p.pending) > streamQueue {
		err := fmt.Errorf("the node reads too slowly: %d bytes wait for it", len(p.pending))
		p.mu.Unlock()
		p.broke(err)
		return err
	}
	wake := !p.writing
	p.writing = true
	p.mu.Unlock()
	if wake {
		p.wake <- struct{}{}
	}
	return nil
}

// write is the peer's writer: it writes what waits, all of it in one
// write, each time it is woken, until the connection breaks or closes.
// What is sent while it writes goes in its next write: under load, one
// system call carries many frames, as gRPC's writer does for the remote.
func (p *streamPeer) write() {
	defer close(p.done)
	var spare []byte
	for {
		select {
		case <-p.wake:
		case <-p.quit:
			return
		}
		for {
			p.mu.Lock()
			buf := p.pending
			if len(buf) == 0 || p.failed != nil {
				p.writing = false
				p.mu.Unlock()
				break
			}
			p.pending = spare[:0]
			p.mu.Unlock()
			p.conn.SetWriteDeadline(time.Now().Add(p.s.timeout))
			if _, err := p.conn.Write(buf); err != nil {
				p.broke(err)
			}
			spare = buf[:0]
		}
	}
}

// broke closes the connection: the links that wrote to it send through
// the remote from now on.
func (p *streamPeer) broke(err error) {
	p.mu.Lock()
	first := !p.closedConn
	p.closedConn = true
	if p.failed == nil {
		p.failed = err
	}
	p.pending = nil
	p.mu.Unlock()
	if !first {
		return
	}
	p.conn.Close()
	close(p.quit)
	p.s.forget(p)
	if !p.s.isClosed() {
		p.s.log.Warn(fmt.Sprintf("cluster: the stream to %s broke (%v): its links send through the remote", p.addr, err))
	}
}
