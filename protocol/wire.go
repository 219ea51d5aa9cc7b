package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/coder/acp-go-sdk"
	"github.com/valyala/fastjson"
)

// The line filter numbers each session's prompts in the order it reads them
// and serves session/cancel itself, with the number of prompts read so far
// for its session: a prompt whose start needs the file system (an
// @mention) is started on another goroutine, so a cancel can reach the
// session before the prompt it cancels; with these numbers the session
// knows exactly which prompts a cancel covers, and an idle cancel covers
// none of the prompts that follow it. Serving cancels here, not through the
// SDK's notification queue, also spares them a goroutine hop: under load a
// cancel waited milliseconds in that queue.

// wireIn filters the client's lines before the SDK reads them. It answers
// lines that are not JSON objects with a JSON-RPC error (the SDK would drop
// them silently), and takes prompts, numbered, and cancels off the wire.
type wireIn struct {
	r       *bufio.Reader
	out     *wireOut
	pending []byte
	err     error
	seq     map[string]uint64
	parser  fastjson.Parser
	noFast  bool // tests: the general path only
	// prompt takes session/prompt requests off the wire (prompt.go); the
	// SDK never sees them.
	prompt func(promptJob)
	// cancel serves session/cancel: the session's prompts numbered up to
	// upTo are cancelled.
	cancel func(sessionID string, upTo uint64)
}

func newWireIn(r io.Reader, out *wireOut) *wireIn {
	return &wireIn{r: bufio.NewReaderSize(r, 64<<10), out: out, seq: make(map[string]uint64)}
}

func (w *wireIn) Read(p []byte) (int, error) {
	for len(w.pending) == 0 {
		if w.err != nil {
			return 0, w.err
		}
		line, err := w.r.ReadBytes('\n')
		w.err = err
		if len(line) > 0 {
			w.pending = w.filter(line)
		}
	}
	n := copy(p, w.pending)
	w.pending = w.pending[n:]
	return n, nil
}

type envelope struct {
	ID     *json.RawMessage `json:"id,omitempty"`
	Method string           `json:"method"`
	Params json.RawMessage  `json:"params"`
}

func (w *wireIn) filter(line []byte) []byte {
	body := bytes.TrimSpace(line)
	if len(body) == 0 {
		return line
	}
	if body[0] != '{' {
		if !json.Valid(body) {
			w.out.writeError(nil, -32700, "Parse error", "the line is not valid JSON")
		} else {
			w.out.writeError(nil, -32600, "Invalid request", "a JSON-RPC message must be a JSON object")
		}
		return nil
	}
	isPrompt := bytes.Contains(body, []byte(`"session/prompt"`))
	if isPrompt {
		if !w.noFast && w.fastPrompt(body) {
			return nil
		}
		// One decoding of the line, here on the reader's long-lived
		// stack, validation included.
		var m struct {
			ID     *json.RawMessage `json:"id"`
			Method string           `json:"method"`
			Params *leanPrompt      `json:"params"`
		}
		err := json.Unmarshal(body, &m)
		var syntax *json.SyntaxError
		switch {
		case errors.As(err, &syntax):
			w.out.writeError(nil, -32700, "Parse error", "the line is not valid JSON")
			return nil
		case err == nil && m.Method == "session/prompt" && m.ID != nil && m.Params != nil:
			sid, blocks, rerr := m.Params.decode(func() (acp.PromptRequest, error) {
				var full struct {
					Params acp.PromptRequest `json:"params"`
				}
				err := json.Unmarshal(body, &full)
				return full.Params, err
			})
			w.dispatch(*m.ID, sid, blocks, rerr)
			return nil
		}
		// Anything else (bad params, another method naming session/prompt
		// in its text) takes the general path below.
	}
	isClose := !isPrompt && bytes.Contains(body, []byte(`"session/close"`))
	if !isPrompt && !isClose && !bytes.Contains(body, []byte(`"session/cancel"`)) {
		if !json.Valid(body) {
			w.out.writeError(nil, -32700, "Parse error", "the line is not valid JSON")
			return nil
		}
		return line
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			w.out.writeError(nil, -32700, "Parse error", "the line is not valid JSON")
			return nil
		}
		return line
	}
	switch {
	case env.Method == "session/prompt" && env.ID != nil:
	case env.Method == "session/cancel" && env.ID == nil:
	case env.Method == "session/close":
		// A closed session's count goes with it; a session loaded later
		// counts afresh, as its new actor does.
		var p struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(env.Params, &p) == nil {
			delete(w.seq, p.SessionID)
		}
		return line
	default:
		return line
	}
	if env.Method == "session/prompt" {
		sid, blocks, rerr := decodePrompt(env.Params)
		w.dispatch(*env.ID, sid, blocks, rerr)
		return nil
	}
	// A cancel covers the session's prompts read so far. Params the SDK
	// would refuse are left to it, for its error.
	var p acp.CancelNotification
	if json.Unmarshal(env.Params, &p) != nil || p.Validate() != nil {
		return line
	}
	w.cancel(string(p.SessionId), w.seq[string(p.SessionId)])
	return nil
}

// fastPrompt takes the common prompt off the wire — text and
// resource_link blocks, every field of the expected type — with fastjson,
// which validates and parses the line without reflection, in a third of
// encoding/json's time (BenchmarkWireInPrompt). It reports false, having done nothing, for anything
// else, including invalid JSON: the general path then answers it exactly
// as the SDK would.
func (w *wireIn) fastPrompt(body []byte) bool {
	// The parser is lenient (a raw control character in a string passes);
	// the validator is not.
	if fastjson.ValidateBytes(body) != nil {
		return false
	}
	v, err := w.parser.ParseBytes(body)
	if err != nil || v.Type() != fastjson.TypeObject {
		return false
	}
	id := v.Get("id")
	params := v.Get("params")
	if id == nil || params == nil || params.Type() != fastjson.TypeObject ||
		(id.Type() != fastjson.TypeNumber && id.Type() != fastjson.TypeString) ||
		string(v.GetStringBytes("method")) != "session/prompt" {
		return false
	}
	sid, ok := fastString(params, "sessionId")
	pv := params.Get("prompt")
	if !ok || pv == nil || pv.Type() != fastjson.TypeArray {
		return false
	}
	prompt, _ := pv.Array()
	blocks := make([]acp.ContentBlock, 0, len(prompt))
	for _, b := range prompt {
		if b.Type() != fastjson.TypeObject {
			return false
		}
		typ := string(b.GetStringBytes("type"))
		switch typ {
		case "text":
			text, ok := fastString(b, "text")
			if !ok {
				return false
			}
			blocks = append(blocks, acp.TextBlock(string(text)))
		case "resource_link":
			uri, ok1 := fastString(b, "uri")
			name, ok2 := fastString(b, "name")
			if !ok1 || !ok2 {
				return false
			}
			blocks = append(blocks, acp.ResourceLinkBlock(string(name), string(uri)))
		default:
			return false
		}
	}
	w.dispatch(id.MarshalTo(nil), acp.SessionId(sid), blocks, nil)
	return true
}

// fastString returns the string field key of object v.
func fastString(v *fastjson.Value, key string) ([]byte, bool) {
	f := v.Get(key)
	if f == nil || f.Type() != fastjson.TypeString {
		return nil, false
	}
	b, _ := f.StringBytes()
	// encoding/json replaces invalid UTF-8; the general path does that.
	return b, utf8.Valid(b)
}

// dispatch hands a decoded prompt to the handler, numbered in its session.
func (w *wireIn) dispatch(id json.RawMessage, sid acp.SessionId, blocks []acp.ContentBlock, rerr *acp.RequestError) {
	job := promptJob{id: append(json.RawMessage(nil), id...), sessionID: sid, blocks: blocks, err: rerr}
	if rerr == nil {
		job.seq = w.seq[string(sid)] + 1
		w.seq[string(sid)] = job.seq
	}
	w.prompt(job)
}

// wireOut is stdout. Every JSON-RPC message is one Write (the SDK writes a
// whole line at a time), serialised here so the filter's own error replies
// never interleave with the SDK's output. It also tells a new session when
// the response that carries its id has been written.
type wireOut struct {
	mu      sync.Mutex
	w       io.Writer
	written map[string]func()
}

func newWireOut(w io.Writer) *wireOut {
	return &wireOut{w: w, written: make(map[string]func())}
}

var sessionIDKey = []byte(`"sessionId":"`)

func (o *wireOut) Write(b []byte) (int, error) {
	o.mu.Lock()
	n, err := o.w.Write(b)
	var fire func()
	if len(o.written) > 0 && bytes.Contains(b, []byte(`"result":`)) {
		if i := bytes.Index(b, sessionIDKey); i >= 0 {
			rest := b[i+len(sessionIDKey):]
			if j := bytes.IndexByte(rest, '"'); j >= 0 {
				id := string(rest[:j])
				if f, ok := o.written[id]; ok {
					delete(o.written, id)
					fire = f
				}
			}
		}
	}
	o.mu.Unlock()
	if fire != nil {
		fire()
	}
	return n, err
}

// afterResponse calls f once the response carrying sessionID is written.
func (o *wireOut) afterResponse(sessionID string, f func()) {
	o.mu.Lock()
	o.written[sessionID] = f
	o.mu.Unlock()
}

// forget drops a pending afterResponse (the request failed after all).
func (o *wireOut) forget(sessionID string) {
	o.mu.Lock()
	delete(o.written, sessionID)
	o.mu.Unlock()
}

func (o *wireOut) writeError(id *json.RawMessage, code int, message, detail string) {
	type rpcErr struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data,omitempty"`
	}
	msg := struct {
		JSONRPC string           `json:"jsonrpc"`
		ID      *json.RawMessage `json:"id"`
		Error   rpcErr           `json:"error"`
	}{"2.0", id, rpcErr{code, message, map[string]any{"error": detail}}}
	b, _ := json.Marshal(msg)
	_, _ = o.Write(append(b, '\n'))
}
