package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/coder/websocket"

	"github.com/mm-agent/mm/jsonrpc"
)

// bridge is one editor's stdio joined to a served mm: two JSON-RPC
// connections, the editor's and the server's, each answering the other's
// requests.
type bridge struct {
	o      Options
	ctx    context.Context // ends on a signal, or once run has returned
	cancel context.CancelFunc
	stderr io.Writer
	stop   chan struct{} // closed on a signal: a drop is not resumed

	// editor is stdin and stdout: its table of requests in flight is the
	// editor's requests sent on and not answered yet. server is the
	// socket: its table of calls is mm connect's own (a reopen's), its
	// table of requests in flight the server's asked of the editor.
	editor *jsonrpc.Conn
	server *jsonrpc.Conn

	// sendMu orders the frames written to the socket with the window kept
	// of them (sent), and with the socket's replacement. It is taken
	// before mu.
	sendMu sync.Mutex
	sent   *sentFrames

	mu   sync.Mutex
	cond *sync.Cond // the socket, its state or the end changed
	ws   *websocket.Conn
	id   string // the connection's, as the server named it (Acp-Connection-Id)
	// epoch numbers the sockets (one more on each resume or reopen), conn
	// the connections (one more on each reopen).
	epoch, conn uint64
	state       linkState
	cause       error                   // why the socket was lost, said by the first to notice
	resumer     uint64                  // the epoch whose loss a resume was started for
	abort       context.CancelCauseFunc // ends a reopen's calls when its socket fails
	gone        error                   // the connection could not be resumed
	recvd       uint64                  // the server's frames read whole on this connection: the cursor
	init        []byte                  // the editor's initialize params, sent again on a reopen
	sessions    map[string]opened       // the sessions the editor has open (reopen.go)
	eof         bool                    // stdin has closed (or a signal came) and every line was sent
	ending      bool                    // run has returned: nothing waits for the socket any more

	drained   chan struct{} // closed once eof and nothing is unanswered
	drainOnce sync.Once
	endOnce   sync.Once
	failed    chan error     // the first failure of a side: stdout, or a send
	wg        sync.WaitGroup // a resume or reopen, the cancels at the end of stdin
}

// linkState is where the socket stands.
type linkState int

const (
	live      linkState = iota // the editor's messages go
	down                       // lost: they wait for a resume
	reopening                  // a new connection: mm connect's own calls only
)

// request is what mm connect notes of a message of the editor's: the tag
// its source gives it, kept in the editor connection's table while a
// request is in flight. Its fields after line are guarded by bridge.mu.
type request struct {
	line  []byte  // the message as the editor wrote it, until it is sent
	conn  uint64  // the connection it was written on (0: not yet)
	opens *opened // a session/new, fork, load or resume: what a reopen needs
}

// frame is the tag of a message of the server's: the frame as it came,
// until it is written on stdout.
type frame struct{ line []byte }

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

// errEnding is what a send gets once run has returned.
var errEnding = errors.New("mm connect is ending")

// newBridge joins o's stdio to the socket ws of the connection id.
func newBridge(ctx context.Context, o Options, ws *websocket.Conn, id string) *bridge {
	b := &bridge{o: o, stderr: o.Stderr, ws: ws, id: id, epoch: 1, conn: 1, stop: make(chan struct{}),
		sent: newSentFrames(sentWindow), drained: make(chan struct{}), failed: make(chan error, 1)}
	b.ctx, b.cancel = context.WithCancel(ctx)
	b.cond = sync.NewCond(&b.mu)
	quiet := slog.New(slog.DiscardHandler)
	b.editor = jsonrpc.New(&fromEditor{b: b, lines: jsonrpc.Lines(o.Stdin, o.MaxLine)},
		&toEditor{b: b, w: jsonrpc.NewLineWriter(o.Stdout)},
		jsonrpc.Options{Handler: jsonrpc.HandlerFunc(b.editorSent), Max: maxTracked, MaxLine: o.MaxLine, LimitName: "acp.maxLineBytes", Log: quiet})
	b.server = jsonrpc.New(&fromServer{b: b, frames: &frames{b: b, epoch: 1, max: max(minFrame, 2*o.MaxLine)}},
		frameWriter{b},
		jsonrpc.Options{Handler: jsonrpc.HandlerFunc(b.serverSent), Max: maxTracked, CallPrefix: "mm-connect-", Log: quiet})
	return b
}

// run serves the connection until it ends: nil, or why it failed.
func (b *bridge) run() error {
	defer b.end()
	editorDone, serverDone := make(chan error, 1), make(chan error, 1)
	go func() { editorDone <- b.editor.Run() }()
	go func() { serverDone <- b.server.Run() }()
	pinging := make(chan struct{})
	defer close(pinging)
	go b.pinger(pinging)
	var drain <-chan time.Time
	signalled := b.ctx.Done()
	for {
		select {
		case err := <-editorDone:
			editorDone = nil
			if err != nil {
				return b.fail(stdinError{err})
			}
			b.endOfInput()
			drain = time.After(Drain)
		case err := <-serverDone:
			serverDone = nil
			if b.stdinClosed() {
				// What was sent is answered, or the server ended it.
				_ = b.current().CloseNow()
				return nil
			}
			return b.fail(err)
		case err := <-b.failed:
			var se sendError
			if errors.As(err, &se) && serverDone != nil {
				// The socket failed under a write: its reader knows why.
				select {
				case derr := <-serverDone:
					err = derr
				case <-time.After(time.Second):
				}
			}
			var oe stdoutError
			if errors.As(err, &oe) && b.stdinClosed() {
				b.leave(editorGone(err))
				return nil
			}
			return b.fail(err)
		case <-b.drained:
			b.leave(b.stdinGone())
			return nil
		case <-drain:
			fmt.Fprintf(b.stderr, "mm connect: %d request(s) unanswered %v after stdin closed; closing\n", b.editor.Pending(), Drain)
			b.leave(b.stdinGone())
			return nil
		case <-signalled:
			// As mm -acp on SIGINT or SIGTERM: the prompts in flight are
			// cancelled and answered (cancelled), then the bridge ends,
			// as at the end of stdin.
			signalled = nil
			close(b.stop)
			b.endOfInput()
			drain = time.After(Drain)
		}
	}
}

// end stops what still waits on the socket once run has returned: a send
// at the gate or in a write, a resume. The socket is closed already (run
// closed it as it ended), or now; so is one a resume put in place
// meanwhile.
func (b *bridge) end() {
	b.mu.Lock()
	b.ending = true
	b.cond.Broadcast()
	b.mu.Unlock()
	b.cancel()
	_ = b.current().CloseNow()
	b.wg.Wait()
	_ = b.current().CloseNow()
}

// failure reports the first failure of a side to run.
func (b *bridge) failure(err error) {
	select {
	case b.failed <- err:
	default:
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
		_ = b.current().CloseNow()
	}
	return errors.New(endReason(err))
}

// leave closes the socket as the client's leaving: a close frame, 1000
// (normal closure), with why, so that mm serve ends the connection at
// once rather than keep it for a resume, as it keeps one whose socket
// vanished (a network drop).
func (b *bridge) leave(why string) {
	b.endOnce.Do(func() {
		if len(why) > maxCloseReason {
			why = why[:maxCloseReason]
		}
		_ = b.current().Close(websocket.StatusNormalClosure, why)
	})
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
		ge errGone
	)
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

// endOfInput starts the drain, once: the turns in flight are cancelled,
// as mm -acp cancels them at end of file, so that their prompts are
// answered soon.
func (b *bridge) endOfInput() {
	b.mu.Lock()
	first := !b.eof
	b.eof = true
	b.mu.Unlock()
	if !first {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		seen := map[string]bool{}
		for _, in := range b.editor.Requests() {
			if in.Method != acp.AgentMethodSessionPrompt || in.Session == "" || seen[in.Session] {
				continue
			}
			seen[in.Session] = true
			cancel, err := jsonrpc.EncodeRequest(jsonrpc.ID{}, acp.AgentMethodSessionCancel, acp.CancelNotification{SessionId: acp.SessionId(in.Session)})
			if err != nil || b.send(jsonrpc.Out{Data: cancel, Session: in.Session}, nil) != nil {
				break // the server is gone: nothing will be answered
			}
		}
		b.checkDrained()
	}()
}

// checkDrained closes drained once stdin has closed and every request of
// the editor's is answered.
func (b *bridge) checkDrained() {
	if b.stdinClosed() && b.editor.Pending() == 0 {
		b.drainOnce.Do(func() { close(b.drained) })
	}
}
