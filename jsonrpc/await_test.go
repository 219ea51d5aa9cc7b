package jsonrpc

import (
	"testing"
	"time"
)

// TestAwait: a call registered with Await stays registered when nobody
// waits on it, so that its late answer finds it; once answered it is no
// longer awaited (a second answer is to no call); the Conn's end closes
// the channels of the calls still waiting, and of any made after.
func TestAwait(t *testing.T) {
	p := newPipeConn(t, Options{Max: 1})
	late, lateCh := p.c.Await("")
	if late != IntID(1) || !p.c.Awaits(late) {
		t.Fatalf("the first call: %v, awaited %t", late, p.c.Awaits(late))
	}
	// Its caller gave up long ago: the answer still reaches the call.
	p.send(t, `{"jsonrpc":"2.0","id":1.0,"result":{"late":true}}`)
	select {
	case r := <-lateCh:
		if string(r.Result) != `{"late":true}` || r.Error != nil {
			t.Errorf("the late answer: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late answer never came")
	}
	if p.c.Awaits(late) {
		t.Error("a call answered is still awaited")
	}
	if p.c.Awaits(IntID(9)) {
		t.Error("a call never made is awaited")
	}
	open, openCh := p.c.Await("")
	p.in.Close()
	select {
	case _, ok := <-openCh:
		if ok {
			t.Error("an answer came at the stream's end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waiting was not told of the end")
	}
	if p.c.Awaits(open) {
		t.Error("a call is awaited after the end")
	}
	if _, after := p.c.Await(""); !closedChan(after) {
		t.Error("a call made after the end waits")
	}
}

// closedChan says whether ch is closed (and empty).
func closedChan(ch <-chan Response) bool {
	select {
	case _, ok := <-ch:
		return !ok
	default:
		return false
	}
}
