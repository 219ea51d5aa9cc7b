package actors

import (
	"context"

	"github.com/mm-agent/mm/llm"
)

// warm readies a model for a session's first turn, in the background: its
// client opens a connection to the server (llm.Warmer: a connection kept
// alive in the pool the sessions of a model share, so the first prompt
// does not pay for the TCP and TLS handshakes), and the main model's
// context window is probed while it is still unknown (the server may have
// started after mm). Neither delays session/new; a server that is down is
// reported by the first turn, not here.
func (rt *Runtime) warm(id string) {
	if w, ok := rt.models[id].(llm.Warmer); ok {
		rt.goWork(func() { w.Warm(rt.ctx) })
	}
	if (id == "default" || id == "") && rt.probe != nil && rt.ContextWindow() == 0 && rt.probing.CompareAndSwap(false, true) {
		rt.goWork(func() {
			defer rt.probing.Store(false)
			if n := rt.probe(rt.ctx); n > 0 {
				rt.window.CompareAndSwap(0, int64(n))
			}
		})
	}
}

// Probe is how the main model's context window is asked for when it is
// not configured; it returns 0 when the server cannot say.
type Probe func(context.Context) int
