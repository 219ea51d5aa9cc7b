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

// stream is a node's own way between nodes for the two messages every
// turn across nodes sends: what a session writes for a client on
// another node (a link's Outs, to the client's edge) and a prompt sent
// straight to a session's actor. One TLS connection from each node to
// each other it sends to (cluster.streamPort, with the cluster's mutual
// TLS), a frame per message, written by one writer goroutine per peer
// (streampeer.go) and read by one goroutine per connection, which hands
// each to its edge or actor there and then. Through protoactor's remote
// the same message passes an endpoint writer's mailbox and gRPC's
// writer goroutine on one side, gRPC's reader and the endpoint reader
// on the other, and HTTP/2's framing: four goroutines to wake, against
// two here. The remote still carries everything else (other requests,
// answers, credits, cancels, gossip).
//
// A link sends all its Outs one way for its life (link.via): newLink
// dials the edge's node, and a link that could not, or whose connection
// broke, sends the rest through the remote. Its items thus never
// overtake each other. What a broken connection had not written is
// lost, as what the remote had queued for a member it lost.
//
// Each frame is: its length (4 bytes, big-endian, what follows), a kind
// (streamOuts, streamCall), the length of the PID id it is for (1 byte)
// and the id, then the message's protobuf. Another kind, a frame over
// streamFrame, a message that does not decode, close the connection; an
// Outs for no edge of this node is dropped, as the remote's dead letter
// was. The edge checks an Outs' proof, and a session's actor a Call's,
// as they check one that came through the remote.
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

func (s *stream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
