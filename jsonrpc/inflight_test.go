package jsonrpc

import (
	"context"
	"testing"
	"time"
)

// TestProxyTables: Awaits names this side's calls waiting, and only those;
// Requests lists the peer's requests read and not answered, and one
// answered leaves it.
func TestProxyTables(t *testing.T) {
	p := newPipeConn(t, Options{Max: 8, CallPrefix: "x-", Handler: HandlerFunc(func(*Request) {})})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	id, wait := p.c.Expect("")
	if !p.c.Awaits(id) || p.c.Awaits(StringID("x-99")) || p.c.Awaits(IntID(1)) {
		t.Errorf("Awaits(%s) %v, of another id %v", id, p.c.Awaits(id), p.c.Awaits(StringID("x-99")))
	}
	p.send(t, `{"jsonrpc":"2.0","id":7,"method":"m","params":{"sessionId":"s"}}`)
	p.send(t, `{"jsonrpc":"2.0","id":"x-1","result":{}}`)
	if _, err := wait(ctx); err != nil {
		t.Fatal(err)
	}
	if p.c.Awaits(id) {
		t.Errorf("%s still awaited once answered", id)
	}
	reqs := p.c.Requests()
	if in, ok := reqs[IntID(7)]; len(reqs) != 1 || !ok || in.Method != "m" || in.Session != "s" {
		t.Errorf("requests in flight: %v", reqs)
	}
	p.c.Respond(IntID(7), nil, nil)
	if n := len(p.c.Requests()); n != 0 {
		t.Errorf("%d requests in flight once answered", n)
	}
}

// TestAbandon: the calls whose note Abandon names end with ErrAbandoned
// and leave the table; a call with another note, or none, waits on, and
// is answered.
func TestAbandon(t *testing.T) {
	p := newPipeConn(t, Options{Max: 8, CallPrefix: "x-", Handler: HandlerFunc(func(*Request) {})})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id1, wait1 := p.c.ExpectNoted("", "node-a")
	id2, wait2 := p.c.ExpectNoted("", "node-b")
	id3, wait3 := p.c.Expect("")
	if n := p.c.Abandon(func(note any) bool { return note == "node-a" }); n != 1 {
		t.Errorf("%d calls abandoned, want 1", n)
	}
	if _, err := wait1(ctx); err != ErrAbandoned {
		t.Errorf("the abandoned call's wait: %v", err)
	}
	if p.c.Awaits(id1) || !p.c.Awaits(id2) || !p.c.Awaits(id3) {
		t.Errorf("awaited: %v %v %v, want false true true", p.c.Awaits(id1), p.c.Awaits(id2), p.c.Awaits(id3))
	}
	for _, id := range []ID{id1, id2, id3} {
		p.send(t, `{"jsonrpc":"2.0","id":`+id.String()+`,"result":{"ok":true}}`)
	}
	for i, wait := range []func(context.Context) (Response, error){wait2, wait3} {
		if r, err := wait(ctx); err != nil || string(r.Result) != `{"ok":true}` {
			t.Errorf("call %d: %s %v", i+2, r.Result, err)
		}
	}
}
