package serve

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/coder/acp-go-sdk"
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

// message is one client message, made one line, split into its members
// once (jsonrpc.Parse: the split mm's ingress reads, handed to it with the
// message) and the few of them the transport reads, as gjson values.
type message struct {
	jsonrpc.Message

	jsonrpc, idv, methodv gjson.Result
	sid                   gjson.Result // params.sessionId
}

// parseMessage checks raw (a frame or a POST body, maybe pretty-printed;
// the caller's, which parseMessage keeps and may change) and makes it one
// line. A message already on one line, as clients write them, is kept as
// it is, parsed in place; one with newlines between its tokens is
// compacted in place (a newline cannot occur inside a JSON string), so
// that what mm reads is the line it would read on stdio, held once.
func parseMessage(raw []byte) (message, error) {
	line := bytes.TrimSpace(raw)
	if len(line) == 0 {
		return message{}, errNotJSON
	}
	if bytes.IndexByte(line, '\n') >= 0 {
		// Valid first: white space dropped could join what it parted.
		if !gjson.ValidBytes(line) && !json.Valid(line) {
			return message{}, errNotJSON
		}
		line = compact(line)
	}
	m := message{Message: jsonrpc.Parse(line)}
	var syntax *json.SyntaxError
	switch {
	case errors.As(m.Err, &syntax):
		return message{}, errNotJSON
	case line[0] == '[':
		return message{}, errBatch
	case line[0] != '{':
		return message{}, errNotAnObj
	}
	m.jsonrpc, m.idv, m.methodv = value(m.JSONRPC), value(m.ID), value(m.Method)
	if len(m.Params) > 0 && m.Params[0] == '{' {
		m.sid = gjson.GetBytes(m.Params, "sessionId")
	}
	return m, nil
}

// compact drops the white space between the tokens of b, in place, and
// returns what is left, the same JSON (b is valid): the white space
// inside strings stays.
func compact(b []byte) []byte {
	out := b[:0]
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		out = append(out, c)
	}
	return out
}

// value is a member's raw JSON as a gjson value; an absent one does not
// exist.
func value(raw json.RawMessage) gjson.Result {
	if raw == nil {
		return gjson.Result{}
	}
	return gjson.ParseBytes(raw)
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
	if (m.Result != nil) == (m.Error != nil) {
		return false
	}
	if m.Error == nil {
		return true
	}
	e := gjson.ParseBytes(m.Error)
	code := e.Get("code")
	return e.IsObject() && code.Type == gjson.Number && code.Num == float64(int64(code.Num)) && e.Get("message").Type == gjson.String
}

// isResponseShaped: anything without a method that looks like an answer,
// well-formed or not; it is never answered.
func (m message) isResponseShaped() bool {
	return !m.methodv.Exists() && (m.idv.Exists() || m.Result != nil || m.Error != nil)
}

// isInitialize: an initialize request, its id null or not.
func (m message) isInitialize() bool {
	meth, _ := m.method()
	return m.envelope() && m.idv.Exists() && meth == acp.AgentMethodInitialize
}

// sessionID is params.sessionId when it is a string.
func (m message) sessionID() (string, bool) {
	return m.sid.Str, m.sid.Type == gjson.String
}

// validID says whether v is an id, by jsonrpc's one rule (ValidID).
func validID(v gjson.Result) bool {
	return v.Exists() && v.Raw != "" && jsonrpc.ValidID(json.RawMessage(v.Raw))
}

// errorResponse is an answer of the transport's own, encoded where every
// answer is (jsonrpc.EncodeResponse); id is the request's raw JSON id
// ("null" when it cannot be known), code one of jsonrpc's kinds', msg the
// TypeScript SDK's words.
func errorResponse(id string, code int, msg string, data any) []byte {
	rid, _ := jsonrpc.IDOf([]byte(id))
	b, _ := jsonrpc.EncodeResponse(rid, nil, &jsonrpc.Error{Code: code, Message: msg, Data: data})
	return b
}
