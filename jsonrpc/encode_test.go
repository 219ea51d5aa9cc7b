package jsonrpc

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestEncodeRequestIsMarshal: a request's bytes are encoding/json's of
// the envelope, whatever its params.
func TestEncodeRequestIsMarshal(t *testing.T) {
	type p struct {
		S string `json:"s"`
		N *int   `json:"n,omitempty"`
	}
	var nilP *p
	for _, tc := range []struct {
		id     ID
		method string
		params any
	}{
		{IntID(1), "session/prompt", &p{S: "ping <&> \"é\"\n"}},
		{IntID(-7), "session/cancel", json.RawMessage(` { "a" : [ 1 , "x y" ] } `)},
		{StringID("a\"b"), "m/é<>", nil},
		{ID{}, "session/cancel", map[string]any{"sessionId": "s"}},
		{IntID(2), "x", json.RawMessage(nil)},
		{IntID(3), "x", nilP},
		{IntID(4), "", json.RawMessage(`null`)},
		{IntID(5), "x", []string{}},
	} {
		w := wire{JSONRPC: "2.0", Method: tc.method, Params: tc.params}
		if !tc.id.IsZero() {
			w.ID = tc.id.AppendJSON(nil)
		}
		want, err := json.Marshal(&w)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EncodeRequest(tc.id, tc.method, tc.params)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("EncodeRequest(%v, %q, %#v)\n got %s\nwant %s", tc.id, tc.method, tc.params, got, want)
		}
	}
	if _, err := EncodeRequest(IntID(1), "x", json.RawMessage(`{"a":`)); err == nil {
		t.Error("a request with params that are not JSON is encoded")
	}
}

// TestPlainString: a method read without a decode is the one
// encoding/json reads; any other is left to it.
func TestPlainString(t *testing.T) {
	for _, raw := range []string{`"session/prompt"`, `""`, `"a\"b"`, `"é"`, `"a\u0041"`, `"tab\t"`, `12`, `"`, `"a"b"`} {
		got, ok := plainString(json.RawMessage(raw))
		var want string
		err := json.Unmarshal([]byte(raw), &want)
		if ok && (err != nil || got != want) {
			t.Errorf("plainString(%s) = %q, encoding/json reads %q (%v)", raw, got, want, err)
		}
		if !ok && err == nil && raw == `"session/prompt"` {
			t.Errorf("plainString(%s) left a plain method to a decode", raw)
		}
	}
}

// TestScanParams: one walk of params finds what SessionOf and
// DuplicateKey find.
func TestScanParams(t *testing.T) {
	for _, raw := range []string{
		`{"sessionId":"s1","prompt":[]}`, `{"prompt":[],"sessionId":"s\"2"}`, `{"sessionId":3}`,
		`{"a":1,"b":{"a":2},"a":3}`, `{"sessionId":"x","sessionId":"y"}`, `[1]`, ``, `{}`,
	} {
		session, dup, twice := scanParams(json.RawMessage(raw))
		wantDup, wantTwice := DuplicateKey([]byte(raw))
		if twice != wantTwice || dup != wantDup {
			t.Errorf("scanParams(%s) finds %q twice=%v, DuplicateKey %q twice=%v", raw, dup, twice, wantDup, wantTwice)
		}
		if want := SessionOf(json.RawMessage(raw)); !twice && session != want {
			t.Errorf("scanParams(%s) finds session %q, SessionOf %q", raw, session, want)
		}
	}
}

// TestAppendStringIsMarshal: AppendString writes every string as
// encoding/json does: the characters it escapes, invalid UTF-8, the line
// separators, and many random strings of them.
func TestAppendStringIsMarshal(t *testing.T) {
	seeds := []string{"", "plain", "é ü 日本", "<a href=\"x\">&amp;</a>", "\x00\x01\x1f\x7f", "\b\f\n\r\t\\\"",
		"\u2028\u2029", "bad \xff\xfe utf8 \xc3", "\xed\xa0\x80 surrogate", "emoji 🙂 \U0010ffff", "\u00a0\ufeff"}
	alphabet := []string{"a", " ", "\"", "\\", "<", ">", "&", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "日", "🙂", "\u2028", "\u2029", "\xff", "\xc3", "\ufffd"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		seeds = append(seeds, b.String())
	}
	for _, s := range seeds {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s); string(got[1:]) != string(want) {
			t.Fatalf("AppendString(%q)\n got %s\nwant %s", s, got[1:], want)
		}
	}
}

// TestAppendResultIsEncodeResponse: the appended envelope is the encoded
// one.
func TestAppendResultIsEncodeResponse(t *testing.T) {
	for _, id := range []ID{IntID(1), IntID(-9007199254740993), StringID("a\"<b>")} {
		want, err := EncodeResponse(id, json.RawMessage(`{"stopReason":"end_turn"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendResult(nil, id, []byte(`{"stopReason":"end_turn"}`)); string(got) != string(want) {
			t.Errorf("AppendResult(%v)\n got %s\nwant %s", id, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "<&>", "\xff\u2028\x00", "é🙂"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("AppendString(%q)\n got %s\nwant %s", s, got, want)
		}
	})
}
