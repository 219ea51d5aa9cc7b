package grains

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/mm-agent/mm/grains/grainspb"
)

// stream is a node's own way for what a session writes (a link's Outs)
// to reach its client's edge on another node: one TLS connection from
// the session's node to the edge's (cluster.streamPort, with the
// cluster's mutual TLS), a frame per Outs, written by the link's actor
// itself and read by one goroutine that hands each to its edge there and
// then. Through protoactor's remote the same Outs passes an endpoint
// writer's mailbox and gRPC's writer goroutine on one side, gRPC's
// reader and the endpoint reader on the other, and HTTP/2's framing:
// four goroutines to wake for each, against none and one here. The
// remote still carries everything else (requests, answers, credits,
// cancels, gossip): only Outs go here, and only to edges.
//
// A link sends all its Outs one way for its life (link.via): its first
// flush dials the edge's node, and a link that could not, or whose
// connection broke, sends the rest through the remote. Its items thus
// never overtake each other. What a broken connection had not written is
// lost, as what the remote had queued for a member it lost.
//
// Each frame is: its length (4 bytes, big-endian, what follows), a kind
// (1: Outs), the edge's PID id's length (1 byte) and the id, then the
// Outs' protobuf. Nothing else is read: another kind, a frame over
// streamFrame, an id of no edge of this node, an Outs that does not
// decode, close the connection. The edge checks the Outs' proof as it
// checks one that came through the remote.
type stream struct {
	log    *slog.Logger
	m      *Member
	ln     net.Listener
	addr   string // host:port, as the other nodes dial it (Conn.stream)
	client *tls.Config
	// timeout bounds a dial and a write: a node that reads nothing for
	// that long is taken as lost for the links that write to it.
	timeout time.Duration

	mu    sync.Mutex
	peers map[string]*streamPeer // by address
	conns map[net.Conn]bool      // accepted, open
	// shaking counts the accepted connections whose handshake has not
	// ended: past streamHandshakes, a new one is closed at once.
	shaking int
	closed  bool
	wg      sync.WaitGroup

	// in counts the Outs taken (tests: the stream is used).
	in atomic.Int64
	// refused logs what the stream refused, at most refusalBurst lines
	// a minute: anyone who reaches its port may try.
	refused *refusals
}

// streamFrame bounds a frame: what gRPC takes in one message by default
// (4 MiB), so that the stream carries whatever the remote would, and a
// little for the frame's head.
const streamFrame = 4<<20 + 64<<10

// streamHandshakes bounds the connections to a node's stream that have
// not ended their handshake: anyone who reaches the port may open them,
// and each holds a goroutine and its buffers for up to the failure
// timeout. A node's own peers dial once each, and a node whose dial is
// refused sends through the remote meanwhile.
const streamHandshakes = 64

// The kinds of frame.
const (
	streamOuts = 1 // an Outs, to an edge of this node
	streamCall = 2 // a prompt sent straight, to a session's actor here
)

// listenStream starts this node's stream on host:port (port 0: a free
// one), taking only peers with a certificate of the cluster's CA.
func listenStream(m *Member, host string, port int, tlsc *nodeTLS, timeout time.Duration, log *slog.Logger) (*stream, error) {
	ln, err := tls.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)), tlsc.server)
	if err != nil {
		return nil, fmt.Errorf("cluster.streamPort: %w", err)
	}
	// The stream is named by the address it listens on, as the remote
	// is (protoactor names a node by its listener's address): a host
	// given by name (advertise ":4020", the pod's hostname) is its IP
	// there, the address the membership lists, which is the only host
	// another node dials (Member.trustedStream).
	at := ln.Addr().(*net.TCPAddr)
	if !at.IP.IsUnspecified() {
		host = at.IP.String()
	}
	s := &stream{log: log, m: m, ln: ln, client: tlsc.client, timeout: timeout,
		addr:  net.JoinHostPort(host, strconv.Itoa(at.Port)),
		peers: map[string]*streamPeer{}, conns: map[net.Conn]bool{}, refused: &refusals{log: log}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is where the other nodes send this node's edges their Outs.
func (s *stream) Addr() string { return s.addr }

func (s *stream) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		if s.shaking >= streamHandshakes {
			s.mu.Unlock()
			s.refused.say(fmt.Sprintf("a connection to this node's stream from %s: %d others have not ended their handshake; it is closed", c.RemoteAddr(), streamHandshakes))
			c.Close()
			continue
		}
		s.shaking++
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.read(c)
	}
}

// read takes the frames of one connection, in its order, and hands each
// Outs to its edge on this goroutine (edgeProcess: it never waits).
func (s *stream) read(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	// A handshake that does not end within the failure timeout is given
	// up: a connection that says nothing holds no goroutine for long.
	_ = c.SetDeadline(time.Now().Add(s.timeout))
	err := c.(*tls.Conn).Handshake()
	s.mu.Lock()
	s.shaking--
	s.mu.Unlock()
	if err != nil {
		s.refused.say(fmt.Sprintf("a connection to this node's stream from %s: %v", c.RemoteAddr(), err))
		return
	}
	_ = c.SetDeadline(time.Time{})
	r := bufio.NewReaderSize(c, 64<<10)
	var head [4]byte
	buf := make([]byte, 0, 64<<10)
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return // the peer closed it, or left
		}
		n := binary.BigEndian.Uint32(head[:])
		if n < 2 || n > streamFrame {
			s.refuse(c, fmt.Sprintf("a frame of %d bytes", n))
			return
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		kind, idLen := buf[0], int(buf[1])
		if (kind != streamOuts && kind != streamCall) || 2+idLen > len(buf) {
			s.refuse(c, fmt.Sprintf("a frame of kind %d", kind))
			return
		}
		id := string(buf[2 : 2+idLen])
		if kind == streamCall {
			if !s.call(id, buf[2+idLen:]) {
				s.refuse(c, "a Call that does not decode")
				return
			}
			continue
		}
		outs := &grainspb.Outs{}
		if err := proto.Unmarshal(buf[2+idLen:], outs); err != nil {
			s.refuse(c, "an Outs that does not decode: "+err.Error())
			return
		}
		e, ok := s.m.edges.Load(id)
		if !ok {
			// A connection closed here since its link last wrote:
			// what comes late for it is dropped, as the remote's dead
			// letter for a stopped edge was.
			continue
		}
		s.in.Add(1)
		edgeProcess{e.(*edgeConn)}.SendUserMessage(nil, outs)
	}
}

// call hands a prompt sent straight to the actor of PID id here, its
// edge's PID the sender, as the remote would: the actor checks its proof.
// An id of no actor here is answered as the remote answers it, a dead
// letter to the edge, which sends the prompt again through the cluster.
func (s *stream) call(id string, b []byte) bool {
	call := &grainspb.Call{}
	if err := proto.Unmarshal(b, call); err != nil || call.Conn == nil {
		return false
	}
	s.in.Add(1)
	sys := s.m.sys
	to := actor.NewPID(sys.Address(), id)
	from := actor.NewPID(call.Conn.Address, call.Conn.Id)
	if p, ok := sys.ProcessRegistry.GetLocal(id); ok {
		if _, actorsOnly := p.(*actor.ActorProcess); actorsOnly {
			p.SendUserMessage(to, &actor.MessageEnvelope{Message: call, Sender: from})
			return true
		}
	}
	sys.Root.Send(from, &actor.DeadLetterResponse{Target: to})
	return true
}

func (s *stream) refuse(c net.Conn, why string) {
	s.refused.say(fmt.Sprintf("the stream from %s, which sent %s: its connection is closed", c.RemoteAddr(), why))
}

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

// Close closes the stream: its listener, what it accepted, what it
// dialed; and waits for its readers.
func (s *stream) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	peers := make([]*streamPeer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	for _, p := range peers {
		<-p.ready
		if p.err == nil {
			p.broke(errors.New("this node's stream is closed"))
			<-p.done
		}
	}
	s.wg.Wait()
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

func (s *stream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
