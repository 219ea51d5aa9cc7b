package protocol

import (
	"encoding/json"
	"slices"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/jsonrpc"
)

// Request ids, and what the ingress reads of a message before it decodes it.

// idKey is jsonrpc.IDKey: how every part of mm compares request ids.
func idKey(raw json.RawMessage) string { return jsonrpc.IDKey(raw) }

// headID is jsonrpc.HeadID.
func headID(head []byte) json.RawMessage { return jsonrpc.HeadID(head) }

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

// validID is jsonrpc.ValidID.
func validID(raw json.RawMessage) bool { return jsonrpc.ValidID(raw) }
