package stress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"sync"

	"github.com/coder/websocket"

	"github.com/mm-agent/mm/logs"
)

// wire carries the harness's JSON-RPC messages, one at a time each way:
// lines on pipes (mm -acp, the echo), text frames on a WebSocket (mm
// serve). The rpc layer builds and reads whole messages and never sees the
// framing.
type wire interface {
	// next returns the next message, valid until the following call. It is
	// called from one goroutine, the rpc's reader.
	next() ([]byte, error)
	// send writes one message; msg may be appended to (it is the caller's
	// and not kept). Safe for concurrent use.
	send(msg []byte) error
	// close ends the sending side after what is queued is written.
	close() error
}

// maxMessage bounds one message from mm, as mm's acp.maxLineBytes bounds
// one from the client.
const maxMessage = 16 << 20

// lineWire is newline-delimited JSON-RPC on a pair of pipes.
type lineWire struct {
	mu sync.Mutex // one line's bytes go out together even when the batch writer writes itself
	w  *logs.BatchWriter
	sc *bufio.Scanner
}

// lines frames messages as lines on w and r. Writes are gathered by one
// goroutine: a thousand sessions writing a line each made one syscall per
// request, in series.
func lines(w io.Writer, r io.Reader) *lineWire {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxMessage)
	return &lineWire{w: logs.NewBatchWriter(w), sc: sc}
}

func (l *lineWire) next() ([]byte, error) {
	if l.sc.Scan() {
		return l.sc.Bytes(), nil
	}
	if err := l.sc.Err(); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

func (l *lineWire) send(msg []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(append(msg, '\n'))
	return err
}

func (l *lineWire) close() error { return l.w.Close() }

// frameWire is ACP's WebSocket transport: one JSON-RPC message per text
// frame, each way.
type frameWire struct {
	ws  *websocket.Conn
	buf bytes.Buffer // the last frame read, reused
}

// frames carries messages on ws.
func frames(ws *websocket.Conn) *frameWire {
	ws.SetReadLimit(maxMessage)
	return &frameWire{ws: ws}
}

// errBinaryFrame ends a connection on which mm sent a binary frame: ACP's
// messages are text, and the harness does not guess.
var errBinaryFrame = errors.New("mm sent a binary WebSocket frame")

func (f *frameWire) next() ([]byte, error) {
	typ, r, err := f.ws.Reader(context.Background())
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, errBinaryFrame
	}
	f.buf.Reset()
	if _, err := f.buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return f.buf.Bytes(), nil
}

// send writes msg as one text frame; the library serialises concurrent
// writers.
func (f *frameWire) send(msg []byte) error {
	return f.ws.Write(context.Background(), websocket.MessageText, msg)
}

// close ends the connection with a normal closure; the close handshake
// ends the reader too.
func (f *frameWire) close() error { return f.ws.Close(websocket.StatusNormalClosure, "") }
