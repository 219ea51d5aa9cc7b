package protocol

import (
	"encoding/json"
	"testing"
)

// TestIDKey: ids compare by value, as acp-go-sdk's canonical id key
// compares them; a string is never a number.
func TestIDKey(t *testing.T) {
	same := [][]string{
		{`1`, `1.0`, `1e0`, `10e-1`, `0.1e1`, `1.000`, ` 1 `},
		{`0`, `-0`, `0.0`, `0e5`},
		{`-12.5`, `-125e-1`, `-1.25E1`},
		{`100`, `1e2`, `1E+2`, `100.0`},
		{`"1"`},
		{`"a\u0062"`, `"ab"`},
	}
	for i, group := range same {
		want := idKey(json.RawMessage(group[0]))
		for _, id := range group[1:] {
			if got := idKey(json.RawMessage(id)); got != want {
				t.Errorf("%s: key %q, want %q as for %s", id, got, want, group[0])
			}
		}
		for j, other := range same {
			if j != i && idKey(json.RawMessage(other[0])) == want {
				t.Errorf("%s and %s share a key", group[0], other[0])
			}
		}
	}
	// Numbers too large to spell out are compared as written, not
	// expanded.
	if k := idKey(json.RawMessage(`1e999999999`)); len(k) > 64 {
		t.Errorf("1e999999999 was expanded to %d bytes", len(k))
	}
}

// TestHeadID: the id of a line too long to read, from its first bytes.
func TestHeadID(t *testing.T) {
	for head, want := range map[string]string{
		`{"jsonrpc":"2.0","id":777,"method":"session/prompt","params":{"prompt":[{"text":"aaaa`: `777`,
		`{"method":"x","id":"a-1","params":{"x":"bbbb`:                                          `"a-1"`,
		`{"params":{"x":"bbbb`:             ``,
		`{"jsonrpc":"2.0","id":null,"m`:    ``,
		`{"jsonrpc":"2.0","id":{"a":1},"m`: ``,
		`[1,2`:                             ``,
	} {
		if got := string(headID([]byte(head))); got != want {
			t.Errorf("%s: id %q, want %q", head, got, want)
		}
	}
}

// TestDuplicateKey: a member twice is found, at the top level only.
func TestDuplicateKey(t *testing.T) {
	for obj, want := range map[string]string{
		`{"method":"a","method":"b"}`: "method",
		`{"a":1,"b":{"a":2,"a":3}}`:   "",
		`{"a":1,"b":2}`:               "",
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k3":3}`: "k3",
		`{"a\u0062":1,"ab":2}`: "ab",
		`{"":1,"a":2,"":3}`:    "",
	} {
		got, twice := duplicateKey([]byte(obj))
		if got != want || twice != (want != "" || obj == `{"":1,"a":2,"":3}`) {
			t.Errorf("%s: %q %t, want %q", obj, got, twice, want)
		}
	}
}
