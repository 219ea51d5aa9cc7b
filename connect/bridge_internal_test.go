package connect

import "testing"

// TestBridgeExactIDs: the bridge waits at end of input for every request
// it sent, each by its exact id. Keyed through a float64, requests 2^53 and
// 2^53+1 were one: the first answer marked both answered, and mm connect
// could exit before the second prompt's answer came down.
func TestBridgeExactIDs(t *testing.T) {
	b := &bridge{asked: map[string]string{}, drained: make(chan struct{})}
	b.track([]byte(`{"jsonrpc":"2.0","id":9007199254740992,"method":"session/prompt","params":{"sessionId":"a"}}`))
	b.track([]byte(`{"jsonrpc":"2.0","id":9007199254740993,"method":"session/prompt","params":{"sessionId":"b"}}`))
	if len(b.asked) != 2 {
		t.Fatalf("%d requests tracked, want 2: %v", len(b.asked), b.asked)
	}
	key, ok := responseID([]byte(`{"jsonrpc":"2.0","id":9007199254740992,"result":{"stopReason":"cancelled"}}`))
	if !ok {
		t.Fatal("the response's id was not read")
	}
	b.eof = true
	b.answered(key)
	if sid, left := b.asked[key]; left || len(b.asked) != 1 {
		t.Fatalf("after one answer: %v (the answered one left: %v %q)", b.asked, left, sid)
	}
	select {
	case <-b.drained:
		t.Fatal("drained with the second prompt unanswered")
	default:
	}
	key, _ = responseID([]byte(`{"id":9007199254740993,"jsonrpc":"2.0","result":{}}`))
	b.answered(key)
	select {
	case <-b.drained:
	default:
		t.Fatalf("not drained once both were answered: %v", b.asked)
	}
}
