package jsonrpc

import (
	"encoding/json"
	"strconv"
)

// ID is a request's id as a comparable value, used directly as a map key:
// two ids are equal when JSON-RPC takes them for the same, exactly, for any
// integer (1, 1.0 and 1e0 are one id; 2^63 and 2^63+1 are two) and any
// string. The zero ID is no id (a notification's). A null id is not an ID:
// no answer could name its request.
type ID struct {
	// key is the canonical form: "s" and the string, or "n" and the
	// number's canonical digits (canonicalNumber).
	key string
}

// IDOf reads raw, an id's JSON, as an ID; ok is false for anything but a
// string or a number (null included).
func IDOf(raw []byte) (id ID, ok bool) {
	k := IDKey(raw)
	if k == "" || k[0] == 'r' {
		return ID{}, false
	}
	return ID{key: k}, true
}

// StringID is the id of the string s.
func StringID(s string) ID { return ID{key: "s" + s} }

// IntID is the id of the number n.
func IntID(n int64) ID { return ID{key: "n" + strconv.FormatInt(n, 10)} }

// IsZero says whether id is no id.
func (id ID) IsZero() bool { return id.key == "" }

// Key is the canonical form of id (jsonrpc.IDKey's), "" for no id.
func (id ID) Key() string { return id.key }

// AppendJSON appends id as JSON: a string quoted, a number in its
// canonical digits, null for no id.
func (id ID) AppendJSON(b []byte) []byte {
	switch {
	case id.key == "":
		return append(b, "null"...)
	case id.key[0] == 's':
		q, _ := json.Marshal(id.key[1:])
		return append(b, q...)
	}
	return append(b, id.key[1:]...)
}

// MarshalJSON writes id as AppendJSON does.
func (id ID) MarshalJSON() ([]byte, error) { return id.AppendJSON(nil), nil }

// UnmarshalJSON reads a string or a number; null is no id.
func (id *ID) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*id = ID{}
		return nil
	}
	v, ok := IDOf(b)
	if !ok {
		return ErrInvalidRequest.With("id must be a string, a number or null")
	}
	*id = v
	return nil
}

// String is id as JSON, for logs.
func (id ID) String() string { return string(id.AppendJSON(nil)) }
