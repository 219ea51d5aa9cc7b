package stress

import (
	"context"
	"time"
)

// pick chooses a turn's kind from the configured shares.
func pick(c *Config, x float64) kind {
	for _, s := range []struct {
		share float64
		k     kind
	}{{c.Bash, kindBash}, {c.Edit, kindEdit}, {c.Ask, kindAsk}, {c.Cancel, kindCancel}, {c.Fail, kindFail}} {
		if x < s.share {
			return s.k
		}
		x -= s.share
	}
	return kindPing
}

// runTurn runs one turn of session t on a and checks it. With -kill-node
// (kl), a turn that fails with its node is counted and not checked; lost
// says the prompt was never answered, and the session stops.
func runTurn(ctx context.Context, c *Config, a *agent, t *tracker, k kind, prompt string, lat, ttfc, cancelLat *hist, errs *errorKinds, kl *killer) (lost bool) {
	t.begin(k, prompt)
	type result struct {
		stop string
		err  error
	}
	pctx, cancel := kl.prompt(ctx)
	defer cancel()
	start := time.Now()
	var r result
	if k != kindCancel {
		r.stop, r.err = a.conn.prompt(pctx, t.id, prompt)
		if skip, lost := kl.settle(ctx, t, r.err); skip {
			return lost
		}
		lat.record(time.Since(start))
	} else {
		resc := make(chan result, 1)
		go func() {
			stop, err := a.conn.prompt(pctx, t.id, prompt)
			resc <- result{stop, err}
		}()
		t.mu.Lock()
		running := t.running
		t.mu.Unlock()
		select {
		case <-running:
		case r = <-resc: // ended before its command ran: counted as a bad stop
			if skip, lost := kl.settle(ctx, t, r.err); skip {
				return lost
			}
			t.end(r.stop, r.err, c.Words)
			return false
		}
		time.Sleep(c.CancelAfter)
		sent := time.Now()
		if err := a.conn.cancel(t.id); err != nil {
			errs.add("session/cancel", err)
		}
		r = <-resc
		if skip, lost := kl.settle(ctx, t, r.err); skip {
			return lost
		}
		cancelLat.record(time.Since(sent))
	}
	if r.err != nil && k != kindFail {
		errs.add("session/prompt", r.err)
	}
	if r.err != nil && k == kindFail {
		errs.add("expected: model failure", r.err)
	}
	if first := t.end(r.stop, r.err, c.Words); first > 0 {
		ttfc.record(first)
	}
	return false
}
