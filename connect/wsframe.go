package connect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/coder/websocket"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/jsonrpc"
)

// The server's side: one WebSocket, each text frame one message (frames,
// a jsonrpc.Source), each message written one text frame (frameWriter, a
// jsonrpc.Writer). The socket under them may be replaced, resumed or
// reopened (resume.go, reopen.go): the source reads the current one, the
// writer writes on it and keeps the window of frames a resume sends
// again; the editor's messages wait at a gate (send) while the socket is
// down.

// minFrame is the least bound of a frame read from the server: a frame
// is read whole, up to twice acp.maxLineBytes (a session/load replays the
// editor's prompts) and no less than this. (A variable: a test lowers it.)
var minFrame = 64 << 20

// frames is the source of the server's connection: the text frames of
// the current socket, each read whole and parsed, its line breaks made
// spaces (in JSON they can only be white space between tokens: the
// message means the same, on one line). The frames read whole are
// counted, the cursor of a resume; a socket that fails is resumed, and
// the next frame is read from the one that replaces it.
type frames struct {
	b      *bridge
	epoch  uint64 // the socket read
	max    int
	warned bool
}

func (f *frames) Next() (jsonrpc.Message, error) {
	b := f.b
	for {
		ws, epoch, err := b.await(f.epoch)
		if err != nil {
			return jsonrpc.Message{}, err
		}
		f.epoch = epoch
		typ, r, err := ws.Reader(context.Background())
		if err == nil && typ != websocket.MessageText {
			if !f.warned {
				fmt.Fprintln(b.stderr, "mm connect: binary frames from the server are ignored: ACP messages are text")
				f.warned = true
			}
			if _, err = io.Copy(io.Discard, r); err == nil {
				continue
			}
		}
		if err == nil {
			var data, head []byte
			var size int
			if data, head, size, err = readFrame(r, f.max); err == nil {
				b.took(epoch)
				if size > f.max {
					b.frameTooLong(head, size, f.max)
					continue
				}
				for i, c := range data {
					if c == '\n' || c == '\r' {
						data[i] = ' '
					}
				}
				if body := bytes.TrimSpace(data); len(body) > 0 {
					return jsonrpc.Parse(body), nil
				}
				continue
			}
		}
		if err := b.readFailed(epoch, err); err != nil {
			return jsonrpc.Message{}, err
		}
		f.epoch = epoch + 1
	}
}

// readFrame reads a frame whole, up to max bytes. A longer one is read to
// its end and dropped: only its size and its first bytes are returned.
func readFrame(r io.Reader, max int) (data, head []byte, size int, err error) {
	data, err = io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil || len(data) <= max {
		return data, nil, len(data), err
	}
	head = data[:min(len(data), jsonrpc.HeadBytes)]
	n, err := io.Copy(io.Discard, r)
	return nil, head, len(data) + int(n), err
}

// frameTooLong drops a frame longer than mm connect reads, saying so; the
// editor's request it answered, if its first bytes name one, is answered
// with an error.
func (b *bridge) frameTooLong(head []byte, size, limit int) {
	why := fmt.Sprintf("mm connect: the server sent a message of %d bytes, longer than mm connect reads (%s: twice acp.maxLineBytes, %s at least); it was dropped",
		size, configs.Bytes(limit), configs.Bytes(minFrame))
	fmt.Fprintln(b.stderr, why)
	if id, ok := jsonrpc.IDOf(jsonrpc.HeadID(head)); ok && !b.server.Awaits(id) {
		if b.editor.Respond(id, nil, jsonrpc.Internal(why, nil)) {
			b.checkDrained()
		}
	}
}

// fromServer is the source of the server's connection: the frames, each
// tagged with its line (frame), but for the server's answers to the
// editor's requests, which go to stdout as the server wrote them, the
// request they answer taken from the editor's table. An answer with a
// null id (the server's to a message it could not read) goes to the
// editor too, as it came.
type fromServer struct {
	b      *bridge
	frames *frames
}

func (s *fromServer) Next() (jsonrpc.Message, error) {
	b := s.b
	for {
		m, err := s.frames.Next()
		if err != nil {
			return m, err
		}
		if isResponse(&m) {
			id, ok := jsonrpc.IDOf(m.ID)
			switch {
			case !ok && string(m.ID) == "null":
				_ = b.editor.Write(jsonrpc.Out{Data: m.Line, Response: true})
				continue
			case ok && !b.server.Awaits(id):
				if in, ok := b.editor.Take(id); ok {
					b.noteAnswer(in, m.Result)
					_ = b.editor.Write(jsonrpc.Out{Data: m.Line, Response: true, ID: id, Session: in.Session})
					b.editor.Written(1)
					b.checkDrained()
					continue
				}
			}
		}
		m.Tag = &frame{line: m.Line}
		return m, nil
	}
}

// serverSent serves a request or notification of the server's, on the
// server's read loop: it goes to the editor as the server wrote it (a
// request stays in the server's table until the editor answers it).
func (b *bridge) serverSent(r *jsonrpc.Request) {
	f, _ := r.Tag.(*frame)
	if f == nil {
		return
	}
	_ = b.editor.Write(jsonrpc.Out{Data: f.line, ID: r.ID, Session: r.Session})
	f.line = nil
}

// ticket is the tag of a message of the editor's on its way to the
// socket: the socket it was let through to. The writer writes it on that
// socket only, while it is up; otherwise it is sent again once the
// socket is (errStale).
type ticket struct {
	epoch uint64
	req   *request // the request's note, when it is one: the connection it went on
}

var errStale = errors.New("the socket was lost meanwhile")

// send writes a message of the editor's (or one of mm connect's for the
// editor: a cancel at the end of stdin) to the server, waiting while the
// socket is down (resumed or reopened); an error says the connection is
// gone for good.
func (b *bridge) send(o jsonrpc.Out, req *request) error {
	for {
		b.mu.Lock()
		for b.gone == nil && !b.ending && b.state != live {
			b.cond.Wait()
		}
		gone, ending, epoch := b.gone, b.ending, b.epoch
		b.mu.Unlock()
		switch {
		case gone != nil:
			return gone
		case ending:
			return errEnding
		}
		o.Tag = ticket{epoch: epoch, req: req}
		if err := b.server.Write(o); !errors.Is(err, errStale) {
			return err
		}
	}
}

// frameWriter writes each message as one text frame on the current
// socket, numbered and kept in the window a resume sends again.
type frameWriter struct{ b *bridge }

func (w frameWriter) Write(o jsonrpc.Out) error {
	b := w.b
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	t, editors := o.Tag.(ticket)
	b.mu.Lock()
	if editors && (t.epoch != b.epoch || b.state != live) {
		b.mu.Unlock()
		return errStale
	}
	ws, epoch := b.ws, b.epoch
	if editors && t.req != nil {
		t.req.conn = b.conn
	}
	b.mu.Unlock()
	b.sent.add(o.Data)
	err := ws.Write(context.Background(), websocket.MessageText, o.Data)
	if err == nil || b.writeLost(epoch, err) {
		return nil // lost with the socket: the resume sends it again
	}
	return sendError{err}
}
