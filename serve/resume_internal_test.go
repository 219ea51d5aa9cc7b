package serve

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestOneResumeAtATime: while a resume takes a dropped connection over
// (between its takeOver and its socket carrying the connection: the
// upgrade's answer is being written), a second resume of it is refused.
// Both were let in: both sockets then answered for the connection, and
// each released it when it ended, so that the server counted one
// connection less than it had (its WaitGroup past zero), and a later
// drain waited for ever with no connection left (issue 42).
func TestOneResumeAtATime(t *testing.T) {
	c := &connection{id: "c", endc: make(chan struct{}), done: make(chan struct{})}
	o := newWSOut(c, 1<<20, time.Hour)
	o.makeResumable()
	o.keep([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)) // frame 1, initialize's answer
	// Dropped: no socket carries it, awaitResume waits (its channel only).
	o.waiting = make(chan struct{})

	if _, err := o.takeOver(1, time.Second); err != nil {
		t.Fatalf("the first resume: %v", err)
	}
	_, err := o.takeOver(1, time.Second)
	var e *errResume
	if !errors.As(err, &e) || e.status != http.StatusConflict {
		t.Fatalf("a second resume while the first takes the connection over: %v, want 409", err)
	}
	// The first one's upgrade failed: it gives the connection back, and
	// the next resume may take it.
	o.giveBack()
	if _, err := o.takeOver(1, time.Second); err != nil {
		t.Fatalf("a resume after the first gave the connection back: %v", err)
	}
}
