package jsonrpc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// countDecoded counts the values of valid JSON as encoding/json reads
// them: every string (member names too), number, literal, object and
// array.
func countDecoded(t *testing.T, body []byte) int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	n := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			continue
		}
		n++
	}
}

// Values counts what encoding/json reads, however the message's bytes
// are cut into pieces as they arrive.
func FuzzValues(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"ping"}]}}`,
		`{"a":"\"","b":"\\","c":"\\\"x","d":[1,-2.5e+3,true,false,null,{}],"e":"\u00e9"}`,
		`[ {} , [] , "" , 0 ]`, `"\\\\\\\\"`, `{"x":"a\\\\\"b"}`,
	} {
		f.Add([]byte(s), uint8(1), uint8(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, a, b uint8) {
		if !json.Valid(body) {
			return
		}
		want := countDecoded(t, body)
		var whole, cut Values
		_, _ = whole.Write(body)
		i, j := min(int(a), len(body)), min(int(a)+int(b), len(body))
		for _, p := range [][]byte{body[:i], body[i:j], body[j:]} {
			_, _ = cut.Write(p)
		}
		if whole.N() != want || cut.N() != want {
			t.Fatalf("%q: %d values whole, %d cut at %d and %d; encoding/json reads %d", body, whole.N(), cut.N(), i, j, want)
		}
	})
}

// A long string is one value, read at IndexByte's pace; a message of many
// small values counts each.
func TestValuesOfShapes(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"text":"` + strings.Repeat(`a\"`, 1<<16) + `"}`, 3},
		{`[` + strings.Repeat(`{"type":"text","text":""},`, 1000) + `0]`, 1 + 5*1000 + 1},
		{`{"a":` + strings.Repeat(`\\`, 10) + `}`, 3}, // not JSON: some count, no more than its bytes
	} {
		var whole Values
		_, _ = whole.Write([]byte(c.body))
		if whole.N() != c.want {
			t.Errorf("%.40q…: %d values, want %d", c.body, whole.N(), c.want)
		}
	}
}
