package jsonrpc

import (
	"strings"
	"unsafe"
)

// The fast path of Parse: one walk of a message's bytes that checks them
// and splits them, where the way before it read them three times (gjson
// checked the line, then walked its members, then the Conn walked params
// for their session and a member named twice). It takes only what it is
// sure of: JSON as RFC 8259 writes it (what encoding/json takes), an
// object at the top, member names without escapes, a sessionId without
// escapes, nesting to maxScanDepth. Anything else goes the way it went
// before, which gives the same Message or says why there is none: the
// fast path never decides that a line is bad.

// maxScanDepth bounds the nesting the fast path walks (encoding/json's own
// bound is ten thousand; past this the slow path reads it).
const maxScanDepth = 256

// paramsScan is what the walk read of params: the session they name and
// the first member name they hold twice (scanParams). of is the params it
// was read from: a Message whose Params were replaced since is read
// again.
type paramsScan struct {
	of      []byte
	session string
	dup     string
	twice   bool
}

// paramsRead is the walk's reading of m.Params, when it is still theirs.
func (m *Message) paramsRead() (session, dup string, twice, ok bool) {
	p := &m.scan
	if p.of == nil || unsafe.SliceData(p.of) != unsafe.SliceData(m.Params) || len(p.of) != len(m.Params) {
		return "", "", false, false
	}
	return p.session, p.dup, p.twice, true
}

type scanner struct {
	b     []byte
	i     int
	depth int
	// m is the message the walk fills; names and params are the member
	// names seen in it and in its params (a name held twice).
	m             *Message
	names, params memberNames
}

// What a container holds (container).
const (
	values        = iota // an array's values
	members              // an object's members, whose names do not matter
	topMembers           // the message's members
	paramsMembers        // the members of its params
)

// fastParse fills m from body (trimmed) in one walk; false when the slow
// path is to read it (m is then to be made again).
func fastParse(body []byte, m *Message) bool {
	if len(body) < 2 || body[0] != '{' {
		return false
	}
	s := scanner{b: body, m: m}
	if !s.container('}', topMembers) {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}

// container reads an object or an array, s.b[s.i] being its opening
// bracket and close its closing one, whose items are of kind items.
func (s *scanner) container(close byte, items int) bool {
	s.i++
	s.depth++
	if s.depth > maxScanDepth {
		return false
	}
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == close {
		s.i++
		s.depth--
		return true
	}
	for {
		if !s.item(items) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case close:
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}

// item reads one item of a container.
func (s *scanner) item(kind int) bool {
	switch kind {
	case values:
		return s.value()
	case members:
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		if _, _, _, ok := s.str(); !ok || !s.colon() {
			return false
		}
		return s.value()
	case topMembers:
		return s.topMember()
	default:
		return s.paramsMember()
	}
}

// topMember reads a member of the message into its field (Message.member)
// and notes a name held twice; params, an object, are read for their
// session and a name held twice on the way.
func (s *scanner) topMember() bool {
	m := s.m
	name, ok := s.name()
	if !ok {
		return false
	}
	if !m.Twice && s.names.again(name) {
		m.Dup, m.Twice = strings.Clone(name), true
	}
	f := m.member(name)
	start := s.i
	if f == &m.Params && s.i < len(s.b) && s.b[s.i] == '{' {
		m.scan, s.params = paramsScan{}, memberNames{}
		if !s.container('}', paramsMembers) {
			return false
		}
		m.scan.of = s.b[start:s.i]
	} else if !s.value() {
		return false
	}
	if f != nil {
		*f = s.b[start:s.i]
	}
	return true
}

// paramsMember reads a member of params for its session and a name held
// twice.
func (s *scanner) paramsMember() bool {
	p := &s.m.scan
	name, ok := s.name()
	if !ok {
		return false
	}
	if !p.twice && s.params.again(name) {
		p.dup, p.twice = strings.Clone(name), true
	}
	start := s.i
	if !s.value() {
		return false
	}
	if name == "sessionId" && !p.twice && p.session == "" && s.b[start] == '"' {
		v := s.b[start+1 : s.i-1]
		for _, c := range v {
			if c == '\\' {
				return false // an escaped session: the slow path unescapes it
			}
		}
		p.session = string(v)
	}
	return true
}

// name reads a member's name and its colon, and the space after it: a
// name with an escape is left to the slow path.
func (s *scanner) name() (string, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	start, end, esc, ok := s.str()
	if !ok || esc || !s.colon() {
		return "", false
	}
	return unsafe.String(unsafe.SliceData(s.b[start:end]), end-start), true
}

// colon reads the colon after a member's name, and the space around it.
func (s *scanner) colon() bool {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return false
	}
	s.i++
	s.ws()
	return true
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value reads one JSON value.
func (s *scanner) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '"':
		_, _, _, ok := s.str()
		return ok
	case '{':
		return s.container('}', members)
	case '[':
		return s.container(']', values)
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return s.number()
		}
		return false
	}
}

func (s *scanner) lit(w string) bool {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return false
	}
	s.i += len(w)
	return true
}

// str reads a string, s.b[s.i] being its quote: where its content starts
// and ends, and whether it holds an escape.
func (s *scanner) str() (start, end int, esc, ok bool) {
	b := s.b
	i := s.i + 1
	start = i
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return start, i, esc, true
		case c < 0x20:
			return 0, 0, false, false
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return 0, 0, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+5 >= len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, 0, false, false
				}
				i += 6
			default:
				return 0, 0, false, false
			}
		default:
			i++
		}
	}
	return 0, 0, false, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return false
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return true
}
