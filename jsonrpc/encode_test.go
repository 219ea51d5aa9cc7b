package jsonrpc

import (
	"encoding/json"
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
