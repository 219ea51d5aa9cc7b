package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Every message a Conn writes is encoded here: a response (its result, or
// its error as the peer must read it), a request, a notification. The
// bytes are acp-go-sdk's: "jsonrpc" first, then "id", "method", "params",
// "result", "error".

// wire is a message as encoding/json writes it.
type wire struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  any             `json:"params,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// EncodeResponse is the answer to the request id (zero: null, a message
// whose id could not be read): result, or err when it is not nil.
func EncodeResponse(id ID, result any, err *Error) ([]byte, error) {
	w := wire{JSONRPC: "2.0", ID: id.AppendJSON(nil)}
	if err != nil {
		w.Error = Said(err)
	} else {
		if result == nil {
			result = struct{}{}
		}
		w.Result = result
	}
	return json.Marshal(&w)
}

// EncodeRequest is a request of method with params (a notification when
// id is zero).
func EncodeRequest(id ID, method string, params any) ([]byte, error) {
	var raw []byte
	check := false // raw is not encoding/json's own: compact it, checked
	switch p := params.(type) {
	case nil:
	case json.RawMessage:
		raw, check = p, true
		if raw == nil {
			raw = []byte("null")
		}
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	if check {
		// As encoding/json takes a RawMessage: compacted, and checked.
		var w bytes.Buffer
		w.Grow(len(raw))
		if err := json.Compact(&w, raw); err != nil {
			return nil, fmt.Errorf("json: error calling MarshalJSON for type json.RawMessage: %w", err)
		}
		raw = w.Bytes()
	}
	return AppendRequest(make([]byte, 0, len(raw)+len(method)+48), id, method, raw, params != nil), nil
}

// AppendRequest appends a request of method (a notification when id is
// zero) to b, with params, compact JSON, when withParams: the envelope is
// appended, not reflected on, and its bytes are encoding/json's
// (TestEncodeRequestIsMarshal). EncodeRequest, which checks its params,
// is the one to use for params not made by the caller.
func AppendRequest(b []byte, id ID, method string, params []byte, withParams bool) []byte {
	b = append(b, `{"jsonrpc":"2.0"`...)
	if !id.IsZero() {
		b = append(b, `,"id":`...)
		b = id.AppendJSON(b)
	}
	if method != "" {
		b = append(b, `,"method":`...)
		b = AppendString(b, method)
	}
	if withParams {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// AppendString appends s to b as encoding/json writes a string: its HTML
// characters escaped too, an invalid byte of UTF-8 as U+FFFD, U+2028 and
// U+2029 escaped (TestAppendStringIsMarshal holds it to encoding/json).
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendResult appends the answer to request id (not zero) whose result
// is result, compact JSON made by the caller: the envelope is appended,
// not reflected on, and its bytes are EncodeResponse's.
func AppendResult(b []byte, id ID, result []byte) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = id.AppendJSON(b)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// Said is e as it goes on the wire: an "Invalid params" error says why in
// its message too (its data's "error"), since a client may show only the
// message (acpx prints "[error] RUNTIME: Invalid params").
func Said(e *Error) *Error {
	if e == nil || e.Code != ErrInvalidParams.Code || e.Message != ErrInvalidParams.Message {
		return e
	}
	data, ok := e.Data.(map[string]any)
	if !ok {
		return e
	}
	why, ok := data["error"].(string)
	if !ok || why == "" {
		return e
	}
	return &Error{Code: e.Code, Message: ErrInvalidParams.Message + ": " + why, Data: e.Data}
}

// SessionOf is params.sessionId when params is an object whose sessionId
// is a string, "" otherwise.
func SessionOf(params json.RawMessage) string {
	if len(params) == 0 || params[0] != '{' {
		return ""
	}
	if v := gjson.GetBytes(params, "sessionId"); v.Type == gjson.String {
		return v.Str
	}
	return ""
}

// sizeOf says n bytes as the config says sizes: "64MiB", "512KiB".
func sizeOf(n int) string {
	for _, u := range []struct {
		size   int
		suffix string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.Itoa(n/u.size) + u.suffix
		}
	}
	return strconv.Itoa(n) + " bytes"
}
