// Package jsonrpc is what every JSON-RPC 2.0 connection of mm shares —
// mm's agent side, mm as an ACP client (agents), mm connect and mm serve's
// transports: how request ids are compared.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// IDKey is the key under which a request id is compared, as acp-go-sdk
// compares the ids it serves (its canonical id key): a string by its value,
// a number by its value whatever its spelling, so that a $/cancel_request
// naming 1 finds the request sent with id 1.0, 1e0 or 10e-1, and two
// integers are two keys however large (9007199254740993 is not
// 9007199254740992, as it is through a float64). Anything else (null, an
// invalid id) is keyed by its text. "" means no id.
func IDKey(raw []byte) string {
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
