package acptest

import (
	"context"
	"testing"

	"github.com/coder/acp-go-sdk"
)

// The tally counts session/update notifications however the stream is cut
// into reads, and nothing else: responses, the agent's requests, other
// notifications. Settle then waits for exactly as many.
func TestTallyCountsUpdateLines(t *testing.T) {
	c := NewClient()
	tl := &tally{c: c}
	stream := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}` + "\n" +
		`{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}` + "\n" +
		`{"jsonrpc":"2.0","id":"mm-1","method":"session/request_permission","params":{}}` + "\n" +
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"_mm/other","params":{}}` + "\n"
	for i := 0; i < len(stream); i += 7 { // reads that cut lines anywhere
		_, _ = tl.Write([]byte(stream[i:min(i+7, len(stream))]))
	}
	c.mu.Lock()
	seen := c.seen
	c.mu.Unlock()
	if seen != 2 {
		t.Fatalf("tally counted %d session/update lines, want 2", seen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Settle(ctx); err == nil {
		t.Fatal("Settle returned with none of the 2 updates handed over")
	}
	for range 2 {
		_ = c.SessionUpdate(context.Background(), acp.SessionNotification{SessionId: "s"})
	}
	if err := c.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
}
