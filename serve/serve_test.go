package serve_test

import (
	"context"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
)

// TestPingPong: each transport carries a whole ACP exchange: initialize,
// session/new, a turn and its updates.
func TestPingPong(t *testing.T) {
	e := newEnv(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
			defer cancel()
			c := e.dial(tr, token)
			sid := c.start(t, ctx)
			resp, err := c.ask(ctx, sid, "ping")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StopReason != acp.StopReasonEndTurn {
				t.Errorf("stop = %s", resp.StopReason)
			}
			if got := acptest.Text(c.rec.Updates(sid)); got != "pong" {
				t.Errorf("text = %q", got)
			}
		})
	}
}
