package stress

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/coder/websocket"

	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/logs"
)

// transport carries the harness's JSON-RPC messages to and from mm: lines
// on pipes (mm -acp, the echo), text frames on a WebSocket (mm serve). It
// is the framing seam of the harness's jsonrpc.Conn: a Source of messages,
// each parsed once, and a Writer of whole messages. The connection never
// sees the framing.
type transport struct {
	src jsonrpc.Source
	w   jsonrpc.Writer
	// close ends the sending side after what is queued is written.
	close func() error
}

// maxMessage bounds one message from mm, as mm's acp.maxLineBytes bounds
// one from the client.
const maxMessage = 16 << 20

// lines frames messages as lines on w and r, read as every connection of
// mm reads them (jsonrpc.Lines). Writes are gathered by one goroutine: a
// thousand sessions writing a line each made one syscall per request, in
// series.
func lines(w io.Writer, r io.Reader) transport {
	bw := logs.NewBatchWriter(w)
	return transport{src: jsonrpc.Lines(r, maxMessage), w: jsonrpc.NewLineWriter(bw), close: bw.Close}
}

// frames is ACP's WebSocket transport: one JSON-RPC message per text
// frame, each way. A frame longer than maxMessage ends the connection (the
// library's read limit), and so does a binary one.
func frames(ws *websocket.Conn) transport {
	ws.SetReadLimit(maxMessage)
	return transport{src: &frameSource{ws: ws}, w: frameWriter{ws},
		close: func() error { return ws.Close(websocket.StatusNormalClosure, "") }}
}

// frameSource reads the frames of a WebSocket as messages.
type frameSource struct {
	ws  *websocket.Conn
	buf bytes.Buffer // the frame being read, reused
}

// errBinaryFrame ends a connection on which mm sent a binary frame: ACP's
// messages are text, and the harness does not guess.
var errBinaryFrame = errors.New("mm sent a binary WebSocket frame")

// Next reads the next frame and parses it once; the message is a copy of
// the frame (its members are kept: a response's result goes to its call).
// An empty frame is skipped, as a blank line is.
func (f *frameSource) Next() (jsonrpc.Message, error) {
	for {
		typ, r, err := f.ws.Reader(context.Background())
		if err != nil {
			return jsonrpc.Message{}, err
		}
		if typ != websocket.MessageText {
			return jsonrpc.Message{}, errBinaryFrame
		}
		f.buf.Reset()
		if _, err := f.buf.ReadFrom(r); err != nil {
			return jsonrpc.Message{}, err
		}
		if body := bytes.TrimSpace(f.buf.Bytes()); len(body) > 0 {
			return jsonrpc.Parse(bytes.Clone(body)), nil
		}
	}
}

// frameWriter sends each message as one text frame; the library
// serialises concurrent writers.
type frameWriter struct{ ws *websocket.Conn }

func (f frameWriter) Write(o jsonrpc.Out) error {
	return f.ws.Write(context.Background(), websocket.MessageText, o.Data)
}
