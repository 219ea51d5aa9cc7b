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
// editor sees nothing of it but a later answer: a frame is read whole
// before it is written on stdout, so a frame the drop cut off comes again
// whole. Meanwhile what the editor writes waits (the reader of stdin
// waits for the socket). A server that has lost the connection (404) or
// the frames after the cursor (409) gets a new connection instead, the
// editor's sessions resumed on it (reopen.go); no server within ResumeFor
// ends mm connect as before: one line on stderr, exit 1.
//
// Who notices a drop: the server's reader (its read fails), a write (it
// fails: the socket is closed, so that the reader notices too) or the
// pinger (a ping unanswered: likewise). The resume starts from the
// reader, once it is done with the lost socket, so that the cursor it
// sends counts every frame it read.

// sentWindow bounds the bytes of frames kept to be sent again.
const sentWindow = 4 << 20

// sentFrames are the frames sent on a connection after its first, the
// initialize (the frames the server counts), the last ones kept.
type sentFrames struct {
	max    int
	frames [][]byte
	first  uint64 // the number of frames[0]; frames are numbered from 1
	next   uint64
	bytes  int
	on     bool // initialize was sent: frames are counted
}

func newSentFrames(max int) *sentFrames { return &sentFrames{max: max, first: 1, next: 1} }

// add numbers and keeps a frame sent after the connection's first. (Its
// first is its initialize: mm serve closes a connection that starts with
// anything else, and mm connect answers itself what is no message.)
func (s *sentFrames) add(line []byte) {
	if !s.on {
		s.on = true
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

var errPingTimeout = errors.New("the server answered no ping")

// await returns the socket to read from epoch on: the current one once
// it is the socket of epoch or a later one (a resume's, or a reopen's
// before its calls), or why there will be none. A socket lost but not
// replaced yet is read, so that the reader finds it failed.
func (b *bridge) await(epoch uint64) (*websocket.Conn, uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.gone == nil && !b.ending && b.epoch < epoch {
		b.cond.Wait()
	}
	switch {
	case b.gone != nil:
		return nil, 0, b.gone
	case b.ending:
		return nil, 0, errEnding
	}
	return b.ws, b.epoch, nil
}

// took counts a frame read whole from the socket of epoch.
func (b *bridge) took(epoch uint64) {
	b.mu.Lock()
	if b.epoch == epoch {
		b.recvd++
	}
	b.mu.Unlock()
}

// resumable says whether a failure of the socket may be resumed: not once
// stdin has closed or a signal came, nor after a close frame of the
// server's (it closed on purpose, and says why). Called with mu held.
func (b *bridge) resumable(err error) bool {
	var ce websocket.CloseError
	return !b.eof && !b.stopping() && !b.ending && !errors.As(err, &ce)
}

// readFailed is the server's reader's failure to read the socket of
// epoch: nil when a socket will replace it (a resume, started here), or
// the error that ends the connection.
func (b *bridge) readFailed(epoch uint64, err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.epoch != epoch:
		return nil // replaced already
	case b.state == reopening:
		// The new connection failed during the reopen: its calls end,
		// and so does the reopen (giveUp).
		if b.abort != nil {
			b.abort(err)
		}
		return nil
	case !b.resumable(err):
		return err
	case b.state == live:
		if !isSocketError(err) {
			return err
		}
		b.state, b.cause = down, err
		b.cond.Broadcast()
	}
	// down: lost here, or by a write or a ping that closed the socket.
	if b.resumer != epoch {
		b.resumer = epoch
		b.wg.Add(1)
		go b.reconnect(epoch, b.cause)
	}
	return nil
}

// writeLost is a write to the socket of epoch that failed: true when it
// is a drop to resume (the frame is in the window, sent again then),
// false when the error is to report. The socket is closed so that the
// reader notices, and starts the resume. Called with sendMu held.
func (b *bridge) writeLost(epoch uint64, err error) bool {
	b.mu.Lock()
	ok := b.epoch == epoch && b.state != reopening && b.resumable(err) && isSocketError(err)
	if ok {
		b.lose(err)
	}
	ws := b.ws
	b.mu.Unlock()
	if ok {
		_ = ws.CloseNow() // the reader sees it end
	}
	return ok
}

// lose marks the socket lost, for cause: the editor's messages wait. A
// lost socket of a reopen ends its calls. Called with mu held.
func (b *bridge) lose(cause error) {
	switch b.state {
	case live:
		b.state, b.cause = down, cause
		b.cond.Broadcast()
	case reopening:
		if b.abort != nil {
			b.abort(cause)
		}
	}
}

// reconnect resumes the connection after the socket of epoch dropped, for
// cause: it dials again with back-off for Options.ResumeFor, sends again
// the frames the server did not take, and puts the new socket in place;
// or it opens a new connection (reopen), or gives up.
func (b *bridge) reconnect(epoch uint64, cause error) {
	defer b.wg.Done()
	start := time.Now()
	fmt.Fprintf(b.stderr, "mm connect: the connection dropped (%v); resuming\n", rootCause(cause))
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		b.mu.Lock()
		cursor, id := b.recvd, b.id
		b.mu.Unlock()
		h := http.Header{}
		h.Set("Acp-Connection-Id", id)
		h.Set("Last-Event-ID", strconv.FormatUint(cursor, 10))
		nws, resp, err := dial(b.ctx, b.o, h)
		if err == nil {
			received, perr := strconv.ParseUint(resp.Header.Get("Acp-Received"), 10, 64)
			b.sendMu.Lock()
			again, ok := b.sent.after(received)
			if perr != nil || !ok {
				b.sendMu.Unlock()
				_ = nws.CloseNow()
				b.giveUp(fmt.Errorf("the server took %q of mm connect's frames, which it no longer holds", resp.Header.Get("Acp-Received")))
				return
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
				b.state = live
				b.cond.Broadcast()
				b.mu.Unlock()
				b.sendMu.Unlock()
				fmt.Fprintf(b.stderr, "mm connect: resumed after %v (try %d; %d frame(s) sent again, the server's after frame %d to come)\n",
					time.Since(start).Round(time.Millisecond), try, len(again), cursor)
				return
			}
			b.sendMu.Unlock()
			_ = nws.CloseNow()
		} else if cannotResume(resp) {
			b.reopen(fmt.Errorf("the server cannot resume the connection (%s)", resp.Status))
			return
		}
		if time.Since(start)+wait > b.o.ResumeFor || b.ctx.Err() != nil || b.stdinClosed() {
			b.giveUp(fmt.Errorf("%v; no resume within %v: %s", rootCause(cause), b.o.ResumeFor, dialFailure(b.o.URL, b.o.Token, resp, err)))
			return
		}
		select {
		case <-time.After(wait):
		case <-b.ctx.Done():
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// giveUp records that the connection is gone for good: what waits for
// the socket gets this error.
func (b *bridge) giveUp(err error) {
	b.mu.Lock()
	b.gone = errGone{"the server went away, and the connection could not be resumed: " + err.Error() +
		"; start the editor's agent again and load the session (its history is kept)"}
	b.cond.Broadcast()
	b.mu.Unlock()
}

// current is the socket now.
func (b *bridge) current() *websocket.Conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ws
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
		b.mu.Lock()
		ws, epoch := b.ws, b.epoch
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(b.ctx, 2*b.o.Ping)
		err := ws.Ping(ctx)
		cancel()
		if err != nil && ctx.Err() != nil && b.ctx.Err() == nil {
			b.mu.Lock()
			if b.epoch == epoch {
				b.lose(errPingTimeout)
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
