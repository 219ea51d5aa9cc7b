package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Request ids, and what the ingress reads of a message before it decodes it.

// idKey is the key under which a request id is compared, as acp-go-sdk
// compares the ids it serves (its canonical id key): a string by its value,
// a number by its value whatever its spelling, so that a $/cancel_request
// naming 1 finds the request sent with id 1.0, 1e0 or 10e-1.
func idKey(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return "s" + s
		}
		return "r" + string(raw)
	}
	if n, err := canonicalNumber(string(raw)); err == nil {
		return "n" + n
	}
	return "r" + string(raw)
}

// maxIDDigits bounds the digits and exponent a numeric id may have, as the
// SDK does: an id of a million digits or 1e999999999 is not expanded.
const maxIDDigits = 4096

var errBadNumber = errors.New("not a JSON number mm can compare")

// canonicalNumber spells a JSON number without a fraction's trailing zeros,
// an exponent or a leading zero: 1.0, 1e0 and 10e-1 are all "1"; -0 is "0".
func canonicalNumber(s string) (string, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > maxIDDigits || e < -maxIDDigits {
			return "", errBadNumber
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" || len(mant) > maxIDDigits || strings.Trim(intPart+frac, "0123456789") != "" {
		return "", errBadNumber
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	for strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		exp++
	}
	if digits == "" {
		return "0", nil
	}
	var out string
	switch {
	case exp >= 0:
		if len(digits)+exp > maxIDDigits {
			return "", errBadNumber
		}
		out = digits + strings.Repeat("0", exp)
	case -exp < len(digits):
		out = digits[:len(digits)+exp] + "." + digits[len(digits)+exp:]
	default:
		if -exp > maxIDDigits {
			return "", errBadNumber
		}
		out = "0." + strings.Repeat("0", -exp-len(digits)) + digits
	}
	if neg {
		out = "-" + out
	}
	return out, nil
}

// headID reads the id of a message from the first bytes of its line (a
// line too long to be read whole): the members before the id must be
// complete in head. It returns nil when no id can be read there.
func headID(head []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if key == "id" {
			if validID(v) && string(v) != "null" {
				return v
			}
			return nil
		}
	}
	return nil
}

// duplicateKey returns a member name that appears twice in the JSON object
// obj, and whether there is one (the name may be ""). encoding/json keeps the last of two, so a message such as
// {"method":"session/list","method":"session/delete"} would be read as the
// one its writer may not have meant: such a message is refused instead.
func duplicateKey(obj []byte) (dup string, twice bool) {
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

// memberNames are the member names of an object seen so far: a slice for
// the handful of a message, a map past 16 (an object of a million members
// costs a million lookups, not a million squared).
type memberNames struct {
	seen []string
	many map[string]bool
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
	if slices.Contains(n.seen, name) {
		return true
	}
	n.seen = append(n.seen, name)
	if len(n.seen) > 16 {
		n.many = make(map[string]bool, 2*len(n.seen))
		for _, s := range n.seen {
			n.many[s] = true
		}
	}
	return false
}

// validID says whether raw is a string, a number or null.
func validID(raw json.RawMessage) bool {
	switch c := raw[0]; {
	case c == '"', c == 'n', c == '-', c >= '0' && c <= '9':
		return true
	}
	return false
}
