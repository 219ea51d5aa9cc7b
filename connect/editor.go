package connect

import (
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/jsonrpc"
)

// The editor's side: stdin's lines (jsonrpc.Lines: each read whole, up to
// acp.maxLineBytes, a longer one answered by the connection as mm -acp
// answers it) and stdout's (jsonrpc.LineWriter: one message a line).

// fromEditor is the source of the editor's connection: stdin's messages,
// each tagged with what mm connect notes of it (request), but for the
// editor's answers to the server's requests, which go to the server, the
// request they answer taken from the server's table.
type fromEditor struct {
	b     *bridge
	lines jsonrpc.Source
}

func (s *fromEditor) Next() (jsonrpc.Message, error) {
	for {
		m, err := s.lines.Next()
		if isResponse(&m) {
			if id, ok := jsonrpc.IDOf(m.ID); ok {
				if in, ok := s.b.server.Take(id); ok {
					serr := s.b.send(jsonrpc.Out{Data: m.Line, Response: true, ID: id, Session: in.Session}, nil)
					s.b.server.Written(1)
					if serr != nil {
						s.b.failure(serr)
					}
					if err != nil {
						return jsonrpc.Message{}, err
					}
					continue
				}
			}
		}
		if m.Line != nil && m.TooLong == 0 {
			m.Tag = &request{line: m.Line}
		}
		return m, err
	}
}

// isResponse says whether m is a response, well formed enough to be
// handed on as it is: one with a usable id goes to the request it
// answers, on the other side.
func isResponse(m *jsonrpc.Message) bool {
	return m.Line != nil && m.TooLong == 0 && m.Err == nil && !m.Twice && m.Method == nil && m.ID != nil &&
		(m.Result != nil || m.Error != nil) && (m.JSONRPC == nil || string(m.JSONRPC) == `"2.0"`)
}

// toEditor is stdout: each message one line. A write that fails means
// the editor is gone, which ends the bridge.
type toEditor struct {
	b *bridge
	w *jsonrpc.LineWriter
}

func (t *toEditor) Write(o jsonrpc.Out) error {
	if err := t.w.Write(o); err != nil {
		t.b.failure(stdoutError{err})
		return stdoutError{err}
	}
	return nil
}

// editorSent serves a request or notification of the editor's, on the
// editor's read loop: what a reopen needs to know of it is noted (the
// editor's initialize, a session opened), and it goes to the server as
// the editor wrote it, once the socket takes it (the read loop waits
// meanwhile: no queue).
func (b *bridge) editorSent(r *jsonrpc.Request) {
	req, _ := r.Tag.(*request)
	if req == nil {
		return
	}
	if r.IsCall() {
		switch r.Method {
		case acp.AgentMethodInitialize:
			b.mu.Lock()
			if b.init == nil {
				b.init = append([]byte{}, r.Params...)
			}
			b.mu.Unlock()
		case acp.AgentMethodSessionNew, acp.AgentMethodSessionFork, acp.AgentMethodSessionLoad, acp.AgentMethodSessionResume:
			at := openingOf(r.Params)
			b.mu.Lock()
			req.opens = at
			b.mu.Unlock()
		}
	}
	line := req.line
	req.line = nil // the table keeps the tag until the answer: not the line
	if err := b.send(jsonrpc.Out{Data: line, ID: r.ID, Session: r.Session}, req); err != nil && err != errEnding {
		b.failure(err)
	}
}
