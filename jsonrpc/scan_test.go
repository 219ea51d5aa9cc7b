package jsonrpc

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// scanSeeds are messages and near-messages: every kind of value, escapes
// where the fast path gives up, names held twice at both levels, case
// variants, depth, and broken JSON of every sort.
var scanSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"hi"}]}}`,
	`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"abc","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a \"quoted\" word\n\u00e9"}}}}`,
	`{"jsonrpc":"2.0","id":"x-1","result":{"stopReason":"end_turn","_meta":{"a":[1,2.5,-3e10,0,true,false,null]}}}`,
	`{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad","data":{"x":[]}}}`,
	` { "jsonrpc" : "2.0" , "id" : 2 , "method" : "m" , "params" : { "sessionId" : "s" , "a" : { } , "b" : [ ] } } `,
	`{"id":1,"id":2,"method":"m"}`,
	`{"method":"m","params":{"sessionId":"a","sessionId":"b"}}`,
	`{"method":"m","params":{"x":1,"x":2,"sessionId":"s"}}`,
	`{"Method":"m","ID":3,"PARAMS":{"sessionId":"s"}}`,
	`{"method":"m","params":{"sessionId":"s"},"params":[1]}`,
	`{"method":"m","params":[1],"Params":{"sessionId":"t"}}`,
	`{"method":"m","params":{"sessionId":"s\u0041"}}`,
	`{"method":"m","params":{"session\u0049d":"s"}}`,
	`{"met\u0068od":"m"}`,
	`{"method":"m","params":{"sessionId":7}}`,
	`{"method":"m","params":{"sessionId":null,"sessionId":"x"}}`,
	`{"method":"m","params":{}}`,
	`{}`,
	`{"a":{"b":{"c":{"d":[[[[{"e":"f"}]]]]}}}}`,
	`{"method":"m","params":"text"}`,
	`{"n":-0,"m":0.0e+0,"o":1E-5,"p":12345678901234567890}`,
	`{"s":"tab\there"}`,
	"{\"s\":\"raw\ttab\"}",
	"{\"s\":\"\xff\xfe bytes\"}",
	`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":+1}`,
	`{"a":tru}`, `{"a":truex}`, `{"a":nul}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12G4"}`,
	`{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":1 "b":2}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":{"b"}}`,
	`{"a":1}}`, `{"a":1} x`, `{"a":1`, `{"a":"unterminated}`, `{`, `}`, `{"a":1}{"b":2}`,
	`[1,2]`, `null`, `"str"`, `42`, ``, `{"a":[1,2,3]`, `{"a":{"b":1}`,
}

// checkScan holds the fast path to the slow one: a body it takes is JSON,
// and its Message, and its reading of params, are those of the way before.
func checkScan(t *testing.T, body []byte) {
	t.Helper()
	var fast Message
	fast.Line = body
	if !fastParse(body, &fast) {
		return
	}
	if !json.Valid(body) {
		t.Fatalf("fast path took %q, which is not JSON", body)
	}
	slow := slowParse(body)
	if slow.Err != nil {
		t.Fatalf("fast path took %q; the slow path says %v", body, slow.Err)
	}
	for _, f := range []struct {
		name       string
		fast, slow []byte
	}{{"jsonrpc", fast.JSONRPC, slow.JSONRPC}, {"id", fast.ID, slow.ID}, {"method", fast.Method, slow.Method},
		{"params", fast.Params, slow.Params}, {"result", fast.Result, slow.Result}, {"error", fast.Error, slow.Error}} {
		if !bytes.Equal(f.fast, f.slow) || (f.fast == nil) != (f.slow == nil) {
			t.Fatalf("%q: %s is %q fast, %q slow", body, f.name, f.fast, f.slow)
		}
	}
	if fast.Dup != slow.Dup || fast.Twice != slow.Twice {
		t.Fatalf("%q: duplicate %q/%v fast, %q/%v slow", body, fast.Dup, fast.Twice, slow.Dup, slow.Twice)
	}
	session, dup, twice, read := fast.paramsRead()
	if !read {
		return
	}
	s2, d2, t2 := scanParams(fast.Params)
	if session != s2 || twice != t2 || twice && dup != d2 {
		t.Fatalf("%q: params read as %q/%q/%v fast, %q/%q/%v by scanParams", body, session, dup, twice, s2, d2, t2)
	}
}

func TestFastParseIsParse(t *testing.T) {
	took := 0
	for _, seed := range scanSeeds {
		var m Message
		if fastParse([]byte(seed), &m) {
			took++
		}
		checkScan(t, []byte(seed))
	}
	if took < 15 {
		t.Fatalf("the fast path took %d of the seeds: it should take every plain message", took)
	}
	// The fast path takes a prompt's line and a streamed update, the
	// lines of every turn, and reads their session.
	for _, seed := range scanSeeds[:2] {
		var m Message
		if !fastParse([]byte(seed), &m) {
			t.Fatalf("the fast path left %s to the slow one", seed)
		}
		if s, _, _, ok := m.paramsRead(); !ok || s == "" {
			t.Fatalf("%s: params not read (%q, %v)", seed, s, ok)
		}
	}
	// Mutations of the seeds: a byte changed, dropped, doubled or cut
	// off, so that every branch sees broken input.
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte(`{}[]":,\ u0123456789eE+-.tfnrl "abAB` + "\t\n\x01\xff")
	for range 50000 {
		b := []byte(scanSeeds[rng.IntN(len(scanSeeds))])
		for range 1 + rng.IntN(3) {
			if len(b) == 0 {
				break
			}
			i := rng.IntN(len(b))
			switch rng.IntN(4) {
			case 0:
				b[i] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				b = append(b[:i], b[i+1:]...)
			case 2:
				b = append(b[:i+1], b[i:]...)
			case 3:
				b = b[:i]
			}
		}
		checkScan(t, bytes.TrimSpace(b))
	}
}

// The fast path gives a deep nesting to the slow one, which reads it.
func TestFastParseDepth(t *testing.T) {
	deep := []byte(`{"a":` + string(bytes.Repeat([]byte("["), 1000)) + string(bytes.Repeat([]byte("]"), 1000)) + `}`)
	var m Message
	if fastParse(deep, &m) {
		t.Fatal("the fast path walked 1000 levels")
	}
	if got := Parse(deep); got.Err != nil {
		t.Fatalf("Parse: %v", got.Err)
	}
}

func FuzzFastParse(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkScan(t, bytes.TrimSpace(b)) })
}
