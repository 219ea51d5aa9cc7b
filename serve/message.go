package serve

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/jsonrpc"
)

// A client's message is checked here the way the TypeScript SDK's AcpServer
// checks it (its core/jsonrpc.js predicates), only as far as the transport
// needs: what is an initialize, what needs an answer, where the answer
// goes. Everything else about a message — a bad method, bad params, a member
// twice — is mm's ingress's to answer, as on stdio.

// Errors of a message the transport cannot pass on.
var (
	errNotJSON  = errors.New("not valid JSON")
	errBatch    = errors.New("a JSON-RPC batch")
	errNotAnObj = errors.New("not a JSON object")
)

// message is one client message, made one line, and its top-level
// members, read in one walk (the first of a name, as gjson.Get finds it).
type message struct {
	line []byte // the JSON, on one line, no newline

	jsonrpc, idv, methodv, params, result, errv gjson.Result
	sid                                         gjson.Result // params.sessionId
}

// parseMessage checks raw (a frame or a POST body, maybe pretty-printed;
// the caller's, which parseMessage may keep) and makes it one line. A
// message already on one line, as clients write them, is kept as it is,
// validated in place; one with newlines between its tokens is compacted
// (json.Compact: a newline cannot occur inside a JSON string), so that the
// line stream mm reads keeps one message per line.
func parseMessage(raw []byte) (message, error) {
	line := bytes.TrimSpace(raw)
	if len(line) == 0 {
		return message{}, errNotJSON
	}
	if bytes.IndexByte(line, '\n') >= 0 {
		var b bytes.Buffer
		b.Grow(len(line))
		if err := json.Compact(&b, line); err != nil {
			return message{}, errNotJSON
		}
		line = b.Bytes()
	} else if !gjson.ValidBytes(line) {
		return message{}, errNotJSON
	}
	switch line[0] {
	case '[':
		return message{}, errBatch
	case '{':
	default:
		return message{}, errNotAnObj
	}
	m := message{line: line}
	first := func(r *gjson.Result, v gjson.Result) {
		if !r.Exists() {
			*r = v
		}
	}
	gjson.ParseBytes(line).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "jsonrpc":
			first(&m.jsonrpc, v)
		case "id":
			first(&m.idv, v)
		case "method":
			first(&m.methodv, v)
		case "params":
			first(&m.params, v)
		case "result":
			first(&m.result, v)
		case "error":
			first(&m.errv, v)
		}
		return true
	})
	if m.params.IsObject() {
		m.sid = m.params.Get("sessionId")
	}
	return m, nil
}

func (m message) method() (string, bool) {
	return m.methodv.Str, m.methodv.Type == gjson.String
}

func (m message) id() gjson.Result { return m.idv }

// envelope: jsonrpc is "2.0".
func (m message) envelope() bool {
	return m.jsonrpc.Type == gjson.String && m.jsonrpc.Str == "2.0"
}

// isRequest: an envelope with a usable id and a method.
func (m message) isRequest() bool {
	_, ok := m.method()
	return m.envelope() && ok && validID(m.id())
}

// isNotification: an envelope with a method and no id.
func (m message) isNotification() bool {
	_, ok := m.method()
	return m.envelope() && ok && !m.id().Exists()
}

// isResponse: an envelope without a method, with a usable id and either a
// result or a well-formed error.
func (m message) isResponse() bool {
	if !m.envelope() || m.methodv.Exists() || !validID(m.id()) {
		return false
	}
	res, e := m.result, m.errv
	if res.Exists() == e.Exists() {
		return false
	}
	if !e.Exists() {
		return true
	}
	code := e.Get("code")
	return e.IsObject() && code.Type == gjson.Number && code.Num == float64(int64(code.Num)) && e.Get("message").Type == gjson.String
}

// isResponseShaped: anything without a method that looks like an answer,
// well-formed or not; it is never answered.
func (m message) isResponseShaped() bool {
	return !m.methodv.Exists() && (m.idv.Exists() || m.result.Exists() || m.errv.Exists())
}

// isInitialize: an initialize request, its id null or not.
func (m message) isInitialize() bool {
	meth, _ := m.method()
	return m.envelope() && m.idv.Exists() && meth == "initialize"
}

// sessionID is params.sessionId when it is a string.
func (m message) sessionID() (string, bool) {
	return m.sid.Str, m.sid.Type == gjson.String
}

func validID(v gjson.Result) bool {
	return v.Type == gjson.Null && v.Exists() || v.Type == gjson.String || v.Type == gjson.Number
}

// idKey is how an id is compared (jsonrpc.IDKey: by type and exact value,
// 1 and 1.0 alike); ok is false when v is not an id.
func idKey(v gjson.Result) (string, bool) {
	if !validID(v) {
		return "", false
	}
	return jsonrpc.IDKey([]byte(v.Raw)), true
}

// outMessage is what the routing needs of a line mm wrote.
type outMessage struct {
	response  bool   // no method: an answer to the client
	id        string // idKey of its id; "" when it has none
	sessionID string // params.sessionId of a request or notification
	result    string // result.sessionId of a response
}

// updatePrefix starts every session/update mm writes: its encoder writes
// the members in one order (protocol's rpcMessage, then the SDK's
// SessionNotification), so the session of most lines is read without
// parsing them.
const updatePrefix = `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"`

// parseOut reads what the routing needs of a line mm wrote. Lines come
// from mm's own encoder, never from a client.
func parseOut(line []byte) outMessage {
	if rest, ok := bytes.CutPrefix(line, []byte(updatePrefix)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return outMessage{sessionID: string(rest[:i])}
		}
	}
	return parseOutSlow(line)
}

func parseOutSlow(line []byte) outMessage {
	r := gjson.GetManyBytes(line, "method", "id", "params.sessionId", "result.sessionId")
	var o outMessage
	o.response = !r[0].Exists()
	o.id, _ = idKey(r[1])
	if r[2].Type == gjson.String {
		o.sessionID = r[2].Str
	}
	if r[3].Type == gjson.String {
		o.result = r[3].Str
	}
	return o
}

// The transport's own JSON-RPC errors, as the TypeScript SDK words them.
const (
	codeParse          = -32700
	codeInvalidRequest = -32600
	codeInternal       = -32603
)

// errorResponse is a JSON-RPC error response; id is raw JSON ("null" when
// the request's id cannot be known).
func errorResponse(id string, code int, msg string, data any) []byte {
	e := map[string]any{"code": code, "message": msg}
	if data != nil {
		e["data"] = data
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "error": e})
	return b
}
