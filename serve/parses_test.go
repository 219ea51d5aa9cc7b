package serve_test

import (
	"testing"

	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/jsonrpc"
)

// TestOneParsePerPrompt: a prompt that comes over WebSocket or streamable
// HTTP is split into its members once, by the transport, and mm's ingress
// reads that split (Connector's jsonrpc.Source): it is not parsed again.
// Before, the transport parsed it to route it, then the ingress read the
// line it was given and parsed it a second time.
func TestOneParsePerPrompt(t *testing.T) {
	const prompts = 20
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			e := newEnv(t, nil)
			c := e.dial(tr, token)
			ctx := testwait.Context(t)
			sid := c.start(t, ctx)
			before := jsonrpc.Parses()
			for range prompts {
				if r, err := c.ask(ctx, sid, "ping"); err != nil || r.StopReason != "end_turn" {
					t.Fatalf("prompt: %v, %v", r, err)
				}
			}
			if n := jsonrpc.Parses() - before; n != prompts {
				t.Errorf("%d prompts over %s were parsed %d times; want once each", prompts, tr, n)
			}
		})
	}
}
