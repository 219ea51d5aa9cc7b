package actors

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mm-agent/mm/llm"
)

// The warm-up readies a model for a session's first turn, in the
// background: its client opens a connection to the server and rehearses
// the first call's code (llm.Warmer), and the main model's context window
// is probed while it is still unknown (the server may have started after
// mm). It uses only time nobody waits on: it runs once no turn has started
// for warmQuiet after the last session/new (or start-up), so a prompt sent
// at once, which opens the connection and runs that code itself, does not
// share the cores with it, and a turn that starts first makes its model's
// warm-up unneeded. Nothing waits for it; a server that is down is
// reported by the first turn, not here. model.warmUp: false turns it off.

// warmQuiet is how long no turn may have started, and no session been
// created, before the warm-up runs. An editor's prompt sent with the
// session comes within a millisecond or two; a person types for seconds.
// Turns that never pause (a bot, a harness) do not put it off for more
// than warmLatest: the window, unknown until probed, matters to them.
const (
	warmQuiet  = 25 * time.Millisecond
	warmLatest = 250 * time.Millisecond
)

// warmer is the runtime's pending warm-up.
type warmer struct {
	mu sync.Mutex
	// models are the models to warm; probe is set when the window should
	// be probed.
	models map[string]bool
	probe  bool
	// asked is when the pending warm-up was first asked for.
	asked  time.Time
	timer  *time.Timer
	closed bool
	// lastTurn is when a turn last started (Unix nanoseconds); pending
	// says models is not empty. Both are read without mu: a turn's start
	// only stores a time.
	lastTurn atomic.Int64
	pending  atomic.Bool
}

// warm asks for model id's warm-up, once things are quiet.
func (rt *Runtime) warm(id string) {
	if !rt.cfg.Model.WarmUp {
		return
	}
	if id == "" {
		id = "default"
	}
	w := &rt.warmup
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.models == nil {
		w.models = map[string]bool{}
	}
	if len(w.models) == 0 && !w.probe {
		w.asked = time.Now()
	}
	if _, ok := rt.models[id].(llm.Warmer); ok {
		w.models[id] = true
		w.pending.Store(true)
	}
	if id == "default" && rt.probe != nil && rt.ContextWindow() == 0 {
		w.probe = true
	}
	rt.armWarm(warmQuiet)
}

// armWarm (re)starts the warm-up's timer; w.mu is held.
func (rt *Runtime) armWarm(d time.Duration) {
	w := &rt.warmup
	if w.timer == nil {
		w.timer = time.AfterFunc(d, rt.warmNow)
		return
	}
	w.timer.Reset(d)
}

// turnStarted tells the warm-up that a turn of model id started: that
// model needs none now, and the others wait for quiet again.
func (rt *Runtime) turnStarted(id string) {
	if !rt.cfg.Model.WarmUp {
		return
	}
	if id == "" {
		id = "default"
	}
	w := &rt.warmup
	w.lastTurn.Store(time.Now().UnixNano())
	if w.pending.Load() {
		w.mu.Lock()
		delete(w.models, id)
		w.pending.Store(len(w.models) > 0)
		w.mu.Unlock()
	}
}

// warmNow runs the pending warm-ups, or waits for quiet a little longer.
func (rt *Runtime) warmNow() {
	w := &rt.warmup
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	since := time.Duration(time.Now().UnixNano() - w.lastTurn.Load())
	if since < warmQuiet && time.Since(w.asked) < warmLatest {
		rt.armWarm(warmQuiet - since)
		return
	}
	for id := range w.models {
		if m, ok := rt.models[id].(llm.Warmer); ok {
			rt.goWork(func() { m.Warm(rt.ctx) })
		}
	}
	clear(w.models)
	w.pending.Store(false)
	if w.probe && rt.ContextWindow() == 0 && rt.probing.CompareAndSwap(false, true) {
		rt.goWork(func() {
			defer rt.probing.Store(false)
			if n := rt.probe(rt.ctx); n > 0 {
				rt.window.CompareAndSwap(0, int64(n))
			}
		})
	}
	w.probe = false
}

// stopWarm ends the warm-ups that have not started; Shutdown calls it
// before it waits for the work goroutines.
func (rt *Runtime) stopWarm() {
	w := &rt.warmup
	w.mu.Lock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

// Probe is how the main model's context window is asked for when it is
// not configured; it returns 0 when the server cannot say.
type Probe func(context.Context) int
