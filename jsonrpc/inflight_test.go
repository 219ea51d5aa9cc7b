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
