package stress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/coder/websocket"

	"github.com/mm-agent/mm/jsonrpc"
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
	mu  sync.Mutex // one line's bytes go out together even when the batch writer writes itself
	w   *logs.BatchWriter
	r   *bufio.Reader
	buf []byte // the last line read, reused
}

// lines frames messages as lines on w and r. Writes are gathered by one
// goroutine: a thousand sessions writing a line each made one syscall per
// request, in series.
func lines(w io.Writer, r io.Reader) *lineWire {
	return &lineWire{w: logs.NewBatchWriter(w), r: bufio.NewReaderSize(r, 64<<10), buf: make([]byte, 0, 64<<10)}
}

// next reads a line as every connection of mm does (jsonrpc.ReadLine); one
// longer than maxMessage ends the run: mm never writes one.
func (l *lineWire) next() ([]byte, error) {
	line, _, size, err := jsonrpc.ReadLineInto(l.r, maxMessage, l.buf)
	switch {
	case line == nil && size > maxMessage:
		return nil, fmt.Errorf("mm wrote a line of %d bytes, over the harness's %d", size, maxMessage)
	case err == io.EOF && len(line) > 0:
		err = nil // the last line, without its newline
	case err != nil:
		return nil, err
	}
	l.buf = line
	return line, err
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
