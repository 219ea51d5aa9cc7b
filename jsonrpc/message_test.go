package jsonrpc

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Parse reads every line as encoding/json and DuplicateKey do: the same
// error or none, the same members, the same duplicate.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"ping"}]}}`,
		`{"jsonrpc":"2.0","id":"x","result":{}}`, `{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}`,
		`{"ID":1,"Method":"initialize"}`, `{"id":1,"id":2}`, `{"method":"a","METHOD":"b"}`, `{"\u0069d":7}`,
		`null`, `[]`, `"s"`, `12`, `{`, `{"a":}`, `{"id":01}`, "{\"text\":\"\xff\"}", `{"params":{"x":1,"x":2}}`, `{"jſonrpc":"1.0"}`, `{"paramſ":[],"ERROR":{}}`, `{"":1,"":2}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		body = bytes.TrimSpace(body)
		if len(body) == 0 {
			return
		}
		var want Message
		wantErr := json.Unmarshal(body, &want)
		got := Parse(body)
		dup, twice, err := got.Dup, got.Twice, got.Err
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", body, err, wantErr)
		}
		if err != nil {
			_, gotSyntax := err.(*json.SyntaxError)
			_, wantSyntax := wantErr.(*json.SyntaxError)
			if gotSyntax != wantSyntax || (gotSyntax && err.Error() != wantErr.Error()) {
				t.Fatalf("%q: error %v, encoding/json's %v", body, err, wantErr)
			}
			return
		}
		if body[0] == '{' {
			if wantDup, wantTwice := DuplicateKey(body); dup != wantDup || twice != wantTwice {
				t.Fatalf("%q: duplicate %q %t, want %q %t", body, dup, twice, wantDup, wantTwice)
			}
		}
		for _, p := range [][3]any{{"jsonrpc", got.JSONRPC, want.JSONRPC}, {"id", got.ID, want.ID}, {"method", got.Method, want.Method},
			{"params", got.Params, want.Params}, {"result", got.Result, want.Result}, {"error", got.Error, want.Error}} {
			g, w := p[1].(json.RawMessage), p[2].(json.RawMessage)
			if !bytes.Equal(g, w) || (g == nil) != (w == nil) {
				t.Fatalf("%q: %s %q, encoding/json's %q", body, p[0], g, w)
			}
		}
	})
}

// BenchmarkParse: a prompt's line, the one line of every turn, split by
// Parse and, for the ratio, as mm's ingress did before it (encoding/json,
// then the duplicate scan).
func BenchmarkParse(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","id":1234,"method":"session/prompt","params":{"sessionId":"sess_0123456789abcdef0123456789","prompt":[{"type":"text","text":"ping"}]}}`)
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if m := Parse(line); m.Err != nil || m.Method == nil {
				b.Fatal(m.Err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m Message
			if err := json.Unmarshal(line, &m); err != nil || m.Method == nil {
				b.Fatal(err)
			}
			DuplicateKey(line)
		}
	})
}

// TestDuplicateKey: a member twice is found, at the top level only.
func TestDuplicateKey(t *testing.T) {
	for obj, want := range map[string]string{
		`{"method":"a","method":"b"}`: "method",
		`{"a":1,"b":{"a":2,"a":3}}`:   "",
		`{"a":1,"b":2}`:               "",
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k3":3}`: "k3",
		// Around the eight names kept in place, past which a map holds them.
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k7":7}`:        "k7",
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k0":0}`: "k0",
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k8":8}`: "k8",
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9}`: "",
		`{"a\u0062":1,"ab":2}`: "ab",
		`{"":1,"a":2,"":3}`:    "",
	} {
		got, twice := DuplicateKey([]byte(obj))
		if got != want || twice != (want != "" || obj == `{"":1,"a":2,"":3}`) {
			t.Errorf("%s: %q %t, want %q", obj, got, twice, want)
		}
	}
}
