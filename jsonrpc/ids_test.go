package jsonrpc

import "testing"

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
		// Past 2^53 a float64 holds one of each pair: the keys do not.
		{`9007199254740992`, `9007199254740992.0`, `9.007199254740992e15`},
		{`9007199254740993`, `90071992547409930e-1`},
		{`-9007199254740993`},
		{`123456789012345678901234567890`},
		{`123456789012345678901234567891`},
		{`"9007199254740993"`},
	}
	for i, group := range same {
		want := IDKey([]byte(group[0]))
		for _, id := range group[1:] {
			if got := IDKey([]byte(id)); got != want {
				t.Errorf("%s: key %q, want %q as for %s", id, got, want, group[0])
			}
		}
		for j, other := range same {
			if j != i && IDKey([]byte(other[0])) == want {
				t.Errorf("%s and %s share a key", group[0], other[0])
			}
		}
	}
	// Numbers too large to spell out are compared as written, not
	// expanded.
	if k := IDKey([]byte(`1e999999999`)); len(k) > 64 {
		t.Errorf("1e999999999 was expanded to %d bytes", len(k))
	}
}
