package stress

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// -kill-node: some time into the turns the run kills (SIGKILL) the last
// node of its cluster, which hosts grains but no connection. Every prompt
// is then answered (a stop reason, or the scripted failure), failed with
// its node (the node-lost error, or another cluster error), or lost (no
// answer within lostAfter: there must be none). A failed turn is not an
// error of the run, but the session's next turn must be answered: it
// reopens the session on a live node from the store. A session whose last
// turn failed runs one more ping turn to show it (not counted in turns).

// nodeLost begins mm's error for a prompt whose node was lost
// (grains.NodeLost, which a test holds this to); the edge's other
// failures begin "cluster:".
const nodeLost = "the node running this session was lost"

// failedWithNode says whether a prompt's error is the cluster's: its
// session's node was lost or could not be reached.
func failedWithNode(err error) bool {
	var re *rpcError
	if !errors.As(err, &re) {
		return false
	}
	return strings.Contains(re.Message, nodeLost) || strings.HasPrefix(re.Message, "cluster:")
}

// KillReport is what a run with -kill-node counted.
type KillReport struct {
	Node int `json:"node"` // the killed node's index, from 0
	// After is when the node was killed, from the first turn (0: never,
	// the turns ended first).
	After    float64 `json:"killed_after_sec"`
	Answered int64   `json:"answered"`
	Failed   int64   `json:"failed_node_lost"`
	Lost     int64   `json:"lost"`
	// FirstFailure is the first node-lost error after the kill, in ms;
	// Reactivation the first answered turn of a session whose turn failed.
	FirstFailure float64 `json:"first_node_lost_ms"`
	Reactivation float64 `json:"reactivation_ms"`
	// Resumed counts the sessions whose turn failed and whose next turn
	// was answered; NotResumed those whose next turn was not (must be 0).
	Resumed    int64 `json:"resumed_sessions"`
	NotResumed int64 `json:"not_resumed_sessions"`
}

// killer kills the node and counts the prompts' ends.
type killer struct {
	lostAfter time.Duration
	timer     *time.Timer
	killed    chan struct{} // closed once the timer's func has run

	mu     sync.Mutex
	at     time.Time // of the kill; zero before
	r      KillReport
	failAt time.Time // the first node-lost error
	backAt time.Time // the first answered turn of a session that failed
}

// lostAfter is how long a prompt may take, with -kill-node, before it is
// counted lost: a request whose node cannot be reached is tried for
// cluster.failureTimeout + serve.drainTimeout (30s by default) + 10s.
func lostAfter(c *Config) time.Duration { return c.FailureTimeout + 2*time.Minute }

// startKiller kills a node of f after c.KillNode.
func startKiller(c *Config, f *fleet, errs *errorKinds) *killer {
	k := &killer{lostAfter: lostAfter(c), killed: make(chan struct{})}
	start := time.Now()
	k.timer = time.AfterFunc(c.KillNode, func() {
		defer close(k.killed)
		k.mu.Lock()
		defer k.mu.Unlock()
		i, err := f.kill()
		if err != nil {
			errs.add("kill-node", err)
			return
		}
		k.at = time.Now()
		k.r.Node, k.r.After = i, k.at.Sub(start).Seconds()
	})
	return k
}

// prompt bounds a prompt's wait.
func (k *killer) prompt(ctx context.Context) (context.Context, context.CancelFunc) {
	if k == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, k.lostAfter)
}

// settle counts a prompt's end for session t. It returns true when the
// turn failed with its node or was lost, and must not be checked; lost
// also stops the session's turns.
func (k *killer) settle(ctx context.Context, t *tracker, err error) (skip, lost bool) {
	if k == nil || ctx.Err() != nil {
		return false, false // no kill, or the run was interrupted
	}
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		k.r.Lost++
		t.abort()
		return true, true
	case err != nil && failedWithNode(err):
		k.r.Failed++
		if !k.at.IsZero() && (k.failAt.IsZero() || now.Before(k.failAt)) {
			k.failAt = now
		}
		if t.failedByKill {
			k.r.NotResumed++ // failed again
		}
		t.failedByKill = true
		t.abort()
		return true, false
	}
	k.r.Answered++
	if t.failedByKill {
		t.failedByKill = false
		if err == nil {
			k.r.Resumed++
			if k.backAt.IsZero() {
				k.backAt = now
			}
		} else {
			k.r.NotResumed++
		}
	}
	return false, false
}

// owes says whether session t must run one more turn: its last failed
// with its node, and a session that failed must show it goes on. The run
// asks once, after the session's turns.
func (k *killer) owes(t *tracker) bool { return k != nil && t.failedByKill }

// report stops the kill if it has not happened and returns the counts.
func (k *killer) report(errs *errorKinds) *KillReport {
	if !k.timer.Stop() {
		<-k.killed
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.r
	if k.at.IsZero() {
		errs.add("kill-node", errors.New("the turns ended before the node was killed"))
		return &r
	}
	if !k.failAt.IsZero() {
		r.FirstFailure = float64(k.failAt.Sub(k.at).Microseconds()) / 1000
	}
	if !k.backAt.IsZero() {
		r.Reactivation = float64(k.backAt.Sub(k.at).Microseconds()) / 1000
	}
	return &r
}
