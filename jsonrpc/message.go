package jsonrpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/tidwall/gjson"
)

// A message, parsed once: whatever carries it (a line on stdio, a
// WebSocket frame, a POST body), a connection's reader splits it into its
// JSON-RPC members here, once, and every layer after reads those members.

// Message is one JSON-RPC message split into its members, undecoded. An
// absent member is nil; a present null is "null". The members are slices
// of Line.
//
// The json tags are encoding/json's reading of the six members, which
// Parse takes where gjson is stricter.
type Message struct {
	// Line is the message, trimmed of white space.
	Line []byte `json:"-"`

	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`

	// Dup is the first member name that appears twice, when Twice.
	Dup   string `json:"-"`
	Twice bool   `json:"-"`
	// Err is why Line is no JSON-RPC message: a *json.SyntaxError when it
	// is not JSON, ErrNotObject when it is JSON but not an object.
	Err error `json:"-"`

	// TooLong, when not 0, is the size of a line longer than the limit,
	// read to its end and dropped; Line is then its first HeadBytes, not
	// parsed (LineTooLong answers it).
	TooLong int `json:"-"`

	// Tag is the transport's own note of where the message came from (a
	// streamable HTTP POST's stream), handed back with the answer to a
	// request (Out.Tag); nil for a stream of lines.
	Tag any `json:"-"`

	// scan is what Parse read of Params on its way (scan.go).
	scan paramsScan
}

// ErrNotObject is Parse's error for JSON that is not an object.
var ErrNotObject = errors.New("a JSON-RPC message is a JSON object")

// parses counts Parse's calls: the parse-count test reads it.
var parses atomic.Uint64

// Parses is how many messages Parse has split since the process began.
// A message read by mm is split once, whichever transport carried it: the
// tests count a prompt's splits with it.
func Parses() uint64 { return parses.Load() }

// Parse splits body (trimmed) as json.Unmarshal into a struct of the six
// members would (names matched without regard to case, the last of a name
// wins; a body that is not JSON, or not an object, is Err, a
// *json.SyntaxError for the first), and finds the first member name that
// appears twice. It reads body once where it can (fastParse, which also
// reads params for the Conn); else twice, validating, then walking its
// members (gjson, in place): the encoding/json decode and the duplicate
// scan after it took four times as long on a prompt's line, the one line
// of every turn.
func Parse(body []byte) Message {
	parses.Add(1)
	m := Message{Line: body}
	if fastParse(body, &m) {
		return m
	}
	return slowParse(body)
}

// slowParse is Parse without its fast path.
func slowParse(body []byte) Message {
	m := Message{Line: body}
	if !gjson.ValidBytes(body) {
		// The slow path: encoding/json's error message, or what it reads
		// where gjson is stricter.
		if err := json.Unmarshal(body, &m); err != nil {
			m.Err = err
			return m
		}
		m.Dup, m.Twice = DuplicateKey(body)
		return m
	}
	if body[0] != '{' {
		if string(body) != "null" { // json.Unmarshal leaves a struct as it is
			m.Err = ErrNotObject
		}
		return m
	}
	var names memberNames
	// body is read in place: no result outlives this call but the
	// members' raw values, which are slices of body.
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, v gjson.Result) bool {
		name := k.String()
		if !m.Twice && names.again(name) {
			m.Dup, m.Twice = name, true
		}
		if f := m.member(name); f != nil {
			if v.Index > 0 {
				*f = body[v.Index : v.Index+len(v.Raw)]
			} else {
				*f = json.RawMessage(v.Raw) // gjson did not say where: a copy
			}
		}
		return true
	})
	return m
}

// member is the field of the member name, or nil, matched as encoding/json
// matches: without regard to case.
func (m *Message) member(name string) *json.RawMessage {
	for _, f := range [...]struct {
		name string
		raw  *json.RawMessage
	}{{"jsonrpc", &m.JSONRPC}, {"id", &m.ID}, {"method", &m.Method}, {"params", &m.Params}, {"result", &m.Result}, {"error", &m.Error}} {
		if name == f.name || strings.EqualFold(name, f.name) {
			return f.raw
		}
	}
	return nil
}

// DuplicateKey returns a member name that appears twice in the JSON object
// obj, and whether there is one (the name may be ""). encoding/json keeps
// the last of two, so a message such as
// {"method":"session/list","method":"session/delete"} would be read as the
// one its writer may not have meant: such a message is refused instead.
func DuplicateKey(obj []byte) (dup string, twice bool) {
	var n memberNames
	// obj is read in place: gjson.ParseBytes would copy a line that may
	// be megabytes long, and no result outlives this call.
	gjson.Parse(unsafe.String(unsafe.SliceData(obj), len(obj))).ForEach(func(k, _ gjson.Result) bool {
		if name := k.String(); n.again(name) {
			dup, twice = name, true
			return false
		}
		return true
	})
	return dup, twice
}

// scanParams reads the members of params (an object, checked JSON) once:
// the session it names (SessionOf) and the first member name that appears
// twice (DuplicateKey).
func scanParams(params json.RawMessage) (session, dup string, twice bool) {
	if len(params) == 0 || params[0] != '{' {
		return "", "", false
	}
	var n memberNames
	gjson.Parse(unsafe.String(unsafe.SliceData(params), len(params))).ForEach(func(k, v gjson.Result) bool {
		name := k.String()
		if n.again(name) {
			dup, twice = name, true
			return false
		}
		if name == "sessionId" && v.Type == gjson.String && session == "" {
			session = strings.Clone(v.Str) // v.Str may be params' own bytes
		}
		return true
	})
	return session, dup, twice
}

// memberNames are the member names of an object seen so far: an array for
// the handful of a message, a map past it (an object of a million members
// costs a million lookups, not a million squared). It holds no pointer
// into itself, so that it stays on its user's stack.
type memberNames struct {
	first [8]string
	n     int
	many  map[string]bool
}

// again records name and says whether it was seen before.
func (n *memberNames) again(name string) bool {
	if n.many != nil {
		if n.many[name] {
			return true
		}
		n.many[name] = true
		return false
	}
	if slices.Contains(n.first[:n.n], name) {
		return true
	}
	if n.n < len(n.first) {
		n.first[n.n] = name
		n.n++
		return false
	}
	n.many = make(map[string]bool, 4*len(n.first))
	for _, s := range n.first {
		n.many[s] = true
	}
	n.many[name] = true
	return false
}

// A Source gives a connection's reader its client's messages, each
// parsed once: a stream's lines (Lines), or the frames and bodies a
// network transport has already parsed to route them. One that knows when
// its stream has ended without being read (serve's inbox) says so with
// Ended() <-chan struct{}: mm's reader, waiting with a request it cannot
// serve yet, stops waiting then.
type Source interface {
	// Next returns the next message, and the error that ended the
	// stream, io.EOF at its end; a message and an error may come
	// together (a last line with no newline). A message with no Line and
	// no TooLong is none.
	Next() (Message, error)
}

// Lines is the Source of a stream of lines (stdio): each line read whole,
// up to max bytes (ReadLine), and parsed; blank lines are skipped.
func Lines(r io.Reader, max int) Source {
	return &lines{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

type lines struct {
	r   *bufio.Reader
	max int
}

func (l *lines) Next() (Message, error) {
	for {
		line, head, size, err := ReadLine(l.r, l.max)
		switch body := bytes.TrimSpace(line); {
		case size > l.max:
			return Message{Line: head, TooLong: size}, err
		case len(body) > 0:
			return Parse(body), err
		case err != nil:
			return Message{}, err
		}
	}
}
