package connect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/jsonrpc"
)

// bridge is one connection's two ways and what the drain needs to know.
type bridge struct {
	o      Options
	ctx    context.Context // ends on a signal
	id     string          // the connection's, as the server named it (Acp-Connection-Id)
	out    *lineOut
	max    int // acp.maxLineBytes
	stderr io.Writer
	stop   chan struct{} // closed on a signal: a drop is not resumed

	// sendMu orders the frames sent: a line, and the frames a resume sends
	// again; resumeMu lets one resume at a time. Both are taken before mu.
	sendMu   sync.Mutex
	resumeMu sync.Mutex
	sent     *sentFrames // guarded by sendMu
	gone     error       // guarded by resumeMu: the connection could not be resumed

	mu        sync.Mutex
	ws        *websocket.Conn    // the socket now
	epoch     uint64             // how many times it was resumed
	recvd     uint64             // the server's frames read whole: the cursor
	stalled   uint64             // the epoch whose ping went unanswered (0: none; epochs start at 1)
	reopened  uint64             // the epoch of the last new connection (reopen.go; 0: none)
	asked     map[string]request // requests sent, unanswered, by id key
	init      []byte             // the editor's initialize, sent again on a reopen
	opening   map[string]opening // requests that open or close a session, unanswered (reopen.go)
	sessions  map[string]opened  // the sessions the editor has open on this connection
	untracked bool               // a request went untracked (maxTracked)
	eof       bool               // stdin has closed and every line was sent
	drained   chan struct{}      // closed once eof and nothing is unanswered
	drainOnce sync.Once
}

// request is one of the editor's requests, sent and not yet answered.
type request struct {
	sid     string          // a prompt's session, else ""
	id      json.RawMessage // its id as the editor wrote it
	written bool            // it went to a socket (a reopen answers it; one not written yet goes on the new connection)
}

// sendError is a write to the socket that failed.
type sendError struct{ err error }

func (e sendError) Error() string { return e.err.Error() }
func (e sendError) Unwrap() error { return e.err }

// stdinError is a read of stdin that failed (not its end).
type stdinError struct{ err error }

func (e stdinError) Error() string { return "stdin: " + e.err.Error() }
func (e stdinError) Unwrap() error { return e.err }

// stdoutError is a write to stdout that failed: the editor is gone.
type stdoutError struct{ err error }

func (e stdoutError) Error() string { return "stdout: " + e.err.Error() }
func (e stdoutError) Unwrap() error { return e.err }

// run serves the connection until it ends: nil, or why it failed.
func (b *bridge) run(ctx context.Context, stdin io.Reader) error {
	b.ctx, b.stop = ctx, make(chan struct{})
	upc, downc := make(chan error, 1), make(chan error, 1)
	go func() { upc <- b.up(stdin) }()
	go func() { downc <- b.down() }()
	pinging := make(chan struct{})
	defer close(pinging)
	go b.pinger(pinging)
	var drain <-chan time.Time
	signalled := ctx.Done()
	for {
		select {
		case err := <-upc:
			upc = nil
			if err == nil {
				drain = time.After(Drain)
				continue
			}
			var se sendError
			if errors.As(err, &se) {
				// The socket failed under a write: its reader knows why.
				select {
				case derr := <-downc:
					err = derr
				case <-time.After(time.Second):
				}
			}
			return b.fail(err)
		case err := <-downc:
			if b.stdinClosed() {
				// What was sent is answered, or the server ended it, or
				// the editor is gone (stdout failed).
				var oe stdoutError
				if errors.As(err, &oe) {
					b.leave(editorGone(err))
				} else {
					ws, _ := b.current()
					_ = ws.CloseNow()
				}
				return nil
			}
			return b.fail(err)
		case <-b.drained:
			b.leave(b.stdinGone())
			return nil
		case <-drain:
			b.mu.Lock()
			n := len(b.asked)
			b.mu.Unlock()
			fmt.Fprintf(b.stderr, "mm connect: %d request(s) unanswered %v after stdin closed; closing\n", n, Drain)
			b.leave(b.stdinGone())
			return nil
		case <-signalled:
			// As mm -acp on SIGINT or SIGTERM: the prompts in flight are
			// cancelled and answered (cancelled), then the bridge ends,
			// as at the end of stdin.
			signalled = nil
			close(b.stop)
			go b.stdinEnded()
			drain = time.After(Drain)
		}
	}
}

// fail closes the socket and says in one line why the connection ended:
// an editor gone (stdin or stdout failed) is said to the server with a
// close frame, as its leaving; a socket that failed is dropped.
func (b *bridge) fail(err error) error {
	var (
		oe stdoutError
		ie stdinError
	)
	if errors.As(err, &oe) || errors.As(err, &ie) {
		b.leave(editorGone(err))
	} else {
		ws, _ := b.current()
		_ = ws.CloseNow()
	}
	return errors.New(endReason(err))
}

// leave closes the socket as the client's leaving: a close frame, 1000
// (normal closure), with why, so that mm serve ends the connection at
// once rather than keep it for a resume, as it keeps one whose socket
// vanished (a network drop).
func (b *bridge) leave(why string) {
	if len(why) > maxCloseReason {
		why = why[:maxCloseReason]
	}
	ws, _ := b.current()
	_ = ws.Close(websocket.StatusNormalClosure, why)
}

// maxCloseReason is the longest reason a close frame carries (RFC 6455:
// 125 bytes of payload, 2 of them the code).
const maxCloseReason = 123

// stdinGone is the reason of the close at the end of stdin, or on a
// signal.
func (b *bridge) stdinGone() string {
	if b.stopping() {
		return "mm connect was stopped (a signal)"
	}
	return "the editor closed mm connect's stdin"
}

// editorGone is the reason of the close when the editor's pipes failed.
func editorGone(err error) string {
	return "the editor is gone: " + err.Error()
}

// endReason is why a connection that was open ended.
func endReason(err error) string {
	var (
		oe stdoutError
		ie stdinError
	)
	var ge errGone
	if errors.As(err, &oe) || errors.As(err, &ie) || errors.As(err, &ge) {
		return err.Error()
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		reason := ce.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return fmt.Sprintf("the server closed the connection: %s (%d)", reason, ce.Code)
	}
	var se sendError
	if errors.As(err, &se) || isSocketError(err) {
		return fmt.Sprintf("the server went away: %v", rootCause(err))
	}
	return err.Error()
}

// isSocketError tells a failure of the socket from one of stdin.
func isSocketError(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.As(err, &ne)
}

// rootCause is the innermost error of err's chain: the library's layers
// ("failed to get reader: failed to read frame header: EOF") say less than
// its last word.
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

func (b *bridge) stdinClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// up sends each line of stdin as one text frame, until end of file.
func (b *bridge) up(stdin io.Reader) error {
	r := bufio.NewReaderSize(stdin, 64<<10)
	for {
		line, head, size, err := jsonrpc.ReadLine(r, b.max)
		switch {
		case size > b.max:
			if werr := b.out.line(jsonrpc.LineTooLong(head, size, configs.Bytes(b.max).String())); werr != nil {
				return werr
			}
		case len(bytes.TrimSpace(line)) > 0:
			line = bytes.TrimSuffix(line, []byte("\r"))
			// Tracked before it is sent: its answer may come first.
			key := b.track(line)
			if werr := b.sendKey(line, key); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			b.stdinEnded()
			return nil
		}
		if err != nil {
			return stdinError{err}
		}
	}
}

// send writes one frame, kept to be sent again should the socket drop
// before the server takes it; a drop is resumed (reconnect) before send
// returns.
func (b *bridge) send(line []byte) error { return b.sendKey(line, "") }

// sendKey is send of the request track named key ("" for none): from the
// moment it is written, a reopen answers it if its answer is lost.
func (b *bridge) sendKey(line []byte, key string) error {
	b.sendMu.Lock()
	b.sent.add(line, isInitialize(line))
	if key != "" {
		b.mu.Lock()
		if r, ok := b.asked[key]; ok {
			r.written = true
			b.asked[key] = r
		}
		b.mu.Unlock()
	}
	ws, epoch := b.current()
	err := ws.Write(context.Background(), websocket.MessageText, line)
	b.sendMu.Unlock()
	if err == nil {
		return nil
	}
	if !b.dropped(err) {
		return sendError{err}
	}
	if _, _, err := b.reconnect(epoch, err); err != nil {
		return sendError{err}
	}
	return nil // sent again by the resume if the server had not taken it
}

// isInitialize says whether a line is the initialize request, after
// which the server counts the frames it takes.
func isInitialize(line []byte) bool {
	m := gjson.GetManyBytes(line, "method", "id")
	return m[0].String() == "initialize" && (m[1].Type == gjson.String || m[1].Type == gjson.Number)
}

// track records a request about to be sent, to know when it is
// answered, and returns its key ("" for anything but a request tracked).
func (b *bridge) track(line []byte) string {
	m := gjson.GetManyBytes(line, "method", "id")
	if !m[0].Exists() {
		return "" // the editor's answer, or not JSON-RPC: the server says so
	}
	key, ok := idKey(m[1])
	if !ok {
		return "" // a notification
	}
	sid := ""
	if m[0].String() == "session/prompt" {
		sid = gjson.GetBytes(line, "params.sessionId").String()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.asked) >= maxTracked {
		b.untracked = true
		return ""
	}
	b.asked[key] = request{sid: sid, id: json.RawMessage(m[1].Raw)}
	if m[0].String() == "initialize" && b.init == nil {
		b.init = bytes.Clone(line)
	}
	b.noteRequest(key, m[0].String(), line)
	return key
}

// answered records the server's answer to the request of this id key.
func (b *bridge) answered(key string) {
	b.mu.Lock()
	delete(b.asked, key)
	b.mu.Unlock()
	b.checkDrained()
}

// stdinEnded starts the drain: the turns in flight are cancelled, as mm
// -acp cancels them at end of file, so that their prompts are answered
// soon.
func (b *bridge) stdinEnded() {
	b.mu.Lock()
	b.eof = true
	seen := map[string]bool{}
	var sessions []string
	for _, r := range b.asked {
		if r.sid != "" && !seen[r.sid] {
			seen[r.sid] = true
			sessions = append(sessions, r.sid)
		}
	}
	b.mu.Unlock()
	for _, sid := range sessions {
		cancel, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/cancel", "params": map[string]string{"sessionId": sid}})
		if err := b.send(cancel); err != nil {
			break // the server is gone: nothing will be answered
		}
	}
	b.checkDrained()
}

func (b *bridge) checkDrained() {
	b.mu.Lock()
	done := b.eof && len(b.asked) == 0 && !b.untracked
	b.mu.Unlock()
	if done {
		b.drainOnce.Do(func() { close(b.drained) })
	}
}

// down writes each text frame of the socket on stdout as one line, until
// the socket ends; a drop is resumed (reconnect), and the frame it cut
// off is finished from the server's copy.
func (b *bridge) down() error {
	warned := false
	ws, epoch := b.current()
	skip := 0 // bytes of the next frame on stdout already
	for {
		typ, r, err := ws.Reader(context.Background())
		if err == nil && typ != websocket.MessageText {
			if !warned {
				fmt.Fprintln(b.stderr, "mm connect: binary frames from the server are ignored: ACP messages are text")
				warned = true
			}
			if _, err = io.Copy(io.Discard, r); err == nil {
				continue
			}
		}
		if err == nil {
			var head []byte
			var n int
			// While a session is being opened, frames are kept whole (up
			// to maxCapture) to read the session id of its answer.
			capture := b.capturing()
			head, n, err = b.out.frame(r, skip, capture)
			if err == nil {
				skip = 0
				b.mu.Lock()
				b.recvd++
				b.mu.Unlock()
				if key, ok := responseID(head); ok {
					if capture {
						b.noteAnswer(key, b.out.captured())
					}
					b.answered(key)
				}
				continue
			}
			var oe stdoutError
			if errors.As(err, &oe) {
				return err
			}
			skip = max(skip, n)
		}
		b.mu.Lock()
		if b.stalled == epoch {
			err = fmt.Errorf("%w (%v)", errPingTimeout, err)
		}
		b.mu.Unlock()
		if !b.dropped(err) {
			return err
		}
		ws, epoch, err = b.reconnect(epoch, err)
		if err != nil {
			return err
		}
		if b.reopenedAt(epoch) {
			skip = 0 // a new connection: the frame cut off will never come again
		}
	}
}

// idKey names a request id so that its answer's id matches it
// (jsonrpc.IDKey): mm echoes a number as it reads it, which may not be as
// it was written (1.0, 1). ok is false for anything but a string or number.
func idKey(v gjson.Result) (string, bool) {
	if v.Type != gjson.String && v.Type != gjson.Number {
		return "", false
	}
	return jsonrpc.IDKey([]byte(v.Raw)), true
}

// responseID reads the id of a response from the first bytes of its
// frame; ok is false for anything else (a request or notification of the
// server's), or when the id is not among those bytes.
func responseID(head []byte) (key string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	var id json.RawMessage
	response := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		k, _ := t.(string)
		switch k {
		case "method":
			return "", false
		case "result", "error":
			response = true
		}
		if response && id != nil {
			break // mm writes the id first: the result need not be read
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		if k == "id" {
			id = v
		}
	}
	if !response || id == nil {
		return "", false
	}
	return idKey(gjson.ParseBytes(id))
}
