package protocol

import (
	"testing"
)

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
