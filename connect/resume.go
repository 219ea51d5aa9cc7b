package connect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// Resuming a dropped connection. mm connect dials saying it will resume
// (Acp-Resume: 1), so that mm serve keeps the connection, and the turn in
// flight, when the socket drops, for serve.resumeTimeout. It counts the
// frames it has read whole (the cursor) and keeps the frames it sent
// after initialize (the last sentWindow bytes of them). When the socket
// drops (a read or a write fails without a close frame of the server's,
// or a ping goes unanswered), it dials again, with back-off, naming the
// connection (Acp-Connection-Id) and its cursor (Last-Event-ID), for
// Options.ResumeFor. The server answers with how many of mm connect's
// frames it took (Acp-Received): those after are sent again, then the
// server's frames after the cursor come, and the bridge goes on. The
// editor sees nothing of it but a later answer: a frame cut off on stdout
// by the drop is finished from its copy, the bytes already written
// skipped. Meanwhile what the editor writes waits (the reader of stdin
// waits for the socket). A server that has lost the connection (404) or
// the frames after the cursor (409) gets a new connection instead, the
// editor's sessions resumed on it (reopen.go); no server within ResumeFor
// ends mm connect as before: one line on stderr, exit 1.

// sentWindow bounds the bytes of frames kept to be sent again.
const sentWindow = 4 << 20

// sentFrames are the frames sent after initialize, the last ones kept.
type sentFrames struct {
	max    int
	frames [][]byte
	first  uint64 // the number of frames[0]; frames are numbered from 1
	next   uint64
	bytes  int
	on     bool // initialize was sent: frames are counted
}

func newSentFrames(max int) *sentFrames { return &sentFrames{max: max, first: 1, next: 1} }

// add numbers and keeps a frame sent after initialize (the frames the
// server counts).
func (s *sentFrames) add(line []byte, initialize bool) {
	if !s.on {
		s.on = initialize
		return
	}
	s.frames = append(s.frames, bytes.Clone(line))
	s.bytes += len(line)
	s.next++
	for s.bytes > s.max && len(s.frames) > 0 {
		s.bytes -= len(s.frames[0])
		s.frames[0] = nil
		s.frames = s.frames[1:]
		s.first++
	}
}

// after returns the frames after the received first ones, or false when
// some of them are no longer kept.
func (s *sentFrames) after(received uint64) ([][]byte, bool) {
	if received+1 < s.first || received >= s.next {
		return nil, false
	}
	return s.frames[received+1-s.first:], true
}

// errGone is a drop that could not be resumed.
type errGone struct{ why string }

func (e errGone) Error() string { return e.why }

// dropped is what happened to the socket of epoch: a drop to resume, or
// an end (a close frame of the server's, or the bridge's own end).
func (b *bridge) dropped(err error) bool {
	if b.stdinClosed() || b.stopping() {
		return false
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return false // the server closed it on purpose: it says why
	}
	return isSocketError(err) || errors.Is(err, errPingTimeout)
}

var errPingTimeout = errors.New("the server answered no ping")

// reconnect resumes the connection after the socket of epoch dropped,
// unless another goroutine did already: it returns the socket to go on
// with, and its epoch. Lines to send wait meanwhile (sendMu).
func (b *bridge) reconnect(epoch uint64, cause error) (*websocket.Conn, uint64, error) {
	b.resumeMu.Lock()
	defer b.resumeMu.Unlock()
	b.mu.Lock()
	ws, cur := b.ws, b.epoch
	b.mu.Unlock()
	if cur != epoch {
		return ws, cur, nil // resumed already
	}
	if b.gone != nil {
		return nil, cur, b.gone
	}
	_ = ws.CloseNow() // a write blocked on it stops
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	start := time.Now()
	fmt.Fprintf(b.stderr, "mm connect: the connection dropped (%v); resuming\n", rootCause(cause))
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		b.mu.Lock()
		cursor := b.recvd
		b.mu.Unlock()
		h := http.Header{}
		h.Set("Acp-Connection-Id", b.id)
		h.Set("Last-Event-ID", strconv.FormatUint(cursor, 10))
		nws, resp, err := dial(b.ctx, b.o, h)
		if err == nil {
			received, perr := strconv.ParseUint(resp.Header.Get("Acp-Received"), 10, 64)
			again, ok := b.sent.after(received)
			if perr != nil || !ok {
				_ = nws.CloseNow()
				return b.giveUp(fmt.Errorf("the server took %q of mm connect's frames, which it no longer holds", resp.Header.Get("Acp-Received")))
			}
			for _, f := range again {
				if err = nws.Write(context.Background(), websocket.MessageText, f); err != nil {
					break
				}
			}
			if err == nil {
				b.mu.Lock()
				b.ws = nws
				b.epoch++
				e := b.epoch
				b.mu.Unlock()
				fmt.Fprintf(b.stderr, "mm connect: resumed after %v (try %d; %d frame(s) sent again, the server's after frame %d to come)\n",
					time.Since(start).Round(time.Millisecond), try, len(again), cursor)
				return nws, e, nil
			}
			_ = nws.CloseNow()
		} else if cannotResume(resp) {
			return b.reopen(fmt.Errorf("the server cannot resume the connection (%s)", resp.Status))
		}
		if time.Since(start)+wait > b.o.ResumeFor || b.ctx.Err() != nil || b.stdinClosed() {
			return b.giveUp(fmt.Errorf("%v; no resume within %v: %s", rootCause(cause), b.o.ResumeFor, dialFailure(b.o.URL, b.o.Token, resp, err)))
		}
		select {
		case <-time.After(wait):
		case <-b.ctx.Done():
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// giveUp records that the connection is gone for good. Called with
// resumeMu held.
func (b *bridge) giveUp(err error) (*websocket.Conn, uint64, error) {
	b.gone = errGone{"the server went away, and the connection could not be resumed: " + err.Error() +
		"; start the editor's agent again and load the session (its history is kept)"}
	return nil, 0, b.gone
}

// current is the socket and its epoch.
func (b *bridge) current() (*websocket.Conn, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ws, b.epoch
}

// pinger checks the socket every Options.Ping while the bridge runs: a
// ping unanswered within twice that closes it, which its reader takes
// for a drop (a network that stalls rather than fails).
func (b *bridge) pinger(done <-chan struct{}) {
	tick := time.NewTicker(b.o.Ping)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		ws, epoch := b.current()
		ctx, cancel := context.WithTimeout(b.ctx, 2*b.o.Ping)
		err := ws.Ping(ctx)
		cancel()
		if err != nil && ctx.Err() != nil && b.ctx.Err() == nil {
			b.mu.Lock()
			if b.epoch == epoch {
				b.stalled = epoch
			}
			b.mu.Unlock()
			_ = ws.CloseNow()
		}
	}
}

// stopping says the bridge is ending (a signal): a socket that fails now
// is not resumed.
func (b *bridge) stopping() bool {
	select {
	case <-b.stop:
		return true
	default:
		return false
	}
}
