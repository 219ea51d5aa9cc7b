package jsonrpc

import "testing"

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
		if got := string(HeadID([]byte(head))); got != want {
			t.Errorf("%s: id %q, want %q", head, got, want)
		}
	}
}
