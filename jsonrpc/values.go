package jsonrpc

import "bytes"

// What decoding a message costs. A message's strings decode to at most
// two and a half times their own bytes (one with an escape is read into a
// buffer, then made a string, and Go rounds each allocation up to its
// size class, by a quarter at most); its other values (objects, arrays, numbers, literals)
// and its member names decode into Go values whose size does not depend on
// the bytes that spelled them: a 15 MiB prompt of empty text blocks, 25
// bytes each, decodes into 180 MiB of allocations. A reader that bounds
// what messages hold (mm serve's room, serve.maxIncomingBytes) charges a
// message DecodeBytes for its decoding, counted with Values as its bytes
// arrive.

// ValueBytes is the most decoding a message allocates for each of its JSON
// values (member names included), beyond its bytes: ACP's types, as mm
// decodes them (protocol's methods, acp-go-sdk's unions read through a map,
// `_meta` as map[string]any), allocate at most about 300 bytes a value in
// the worst shapes measured (protocol's TestDecodeWithinCharge), slices
// grown on the way included.
const ValueBytes = 512

// DecodeBytes is what decoding a message of n bytes and values JSON values
// may allocate: its bytes two and a half times, and ValueBytes a value.
func DecodeBytes(n, values int) int64 {
	return 5*int64(n)/2 + int64(values)*ValueBytes
}

// Values counts the JSON values a message holds — every string (member
// names too), object, array, number and literal — from its bytes as they
// arrive, piece by piece: a reader counts a message it has not yet read
// whole. For text that is not JSON the count is some number no larger than
// its bytes. The zero Values is ready; one counts one message.
type Values struct {
	n        int
	inString bool // inside a string
	slashes  int  // backslashes that end what was read of the string
	inScalar bool // inside a number or a literal
}

// N is the number of values counted so far.
func (v *Values) N() int { return v.n }

// Write counts the values that begin in p, the message's next bytes.
func (v *Values) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if v.inString {
			// The rest of a string, to its closing quote: a quote after
			// an odd number of backslashes is escaped.
			i := bytes.IndexByte(p, '"')
			if i < 0 {
				v.slashes = trailing(p, v.slashes)
				return n, nil
			}
			if trailing(p[:i], v.slashes)%2 == 0 {
				v.inString = false
			}
			v.slashes = 0
			p = p[i+1:]
			continue
		}
		c := p[0]
		p = p[1:]
		switch {
		case c == '"':
			v.n++
			v.inString, v.inScalar = true, false
		case c == '{' || c == '[':
			v.n++
			v.inScalar = false
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ':' || c == '}' || c == ']':
			v.inScalar = false
		default: // a number's or a literal's bytes
			if !v.inScalar {
				v.n++
				v.inScalar = true
			}
		}
	}
	return n, nil
}

// trailing is the number of backslashes that end p, after the before that
// ended what came before it when p is all backslashes.
func trailing(p []byte, before int) int {
	k := 0
	for k < len(p) && p[len(p)-1-k] == '\\' {
		k++
	}
	if k == len(p) {
		return before + k
	}
	return k
}
