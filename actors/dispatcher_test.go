package actors

import (
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestDispatcherTwoQuickJobs: two jobs scheduled at once while one worker
// is idle and the others are held (mailboxes that do not empty) both run:
// the second does not wait behind the first.
func TestDispatcherTwoQuickJobs(t *testing.T) {
	for try := 0; try < 20; try++ {
		d := newDispatcher()
		hold := make(chan struct{})
		// Every worker but one is held.
		started := make(chan struct{}, base())
		for i := 0; i < base()-1; i++ {
			d.Schedule(func() { started <- struct{}{}; <-hold })
		}
		for i := 0; i < base()-1; i++ {
			<-started
		}
		// One more worker, idle once its job is done.
		idle := make(chan struct{})
		d.Schedule(func() { close(idle) })
		<-idle
		for deadline := time.Now().Add(testwait.Hang); ; time.Sleep(time.Millisecond) {
			d.mu.Lock()
			n := d.idle
			d.mu.Unlock()
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the worker never went idle")
			}
		}
		// Two jobs at once: the first holds its worker too.
		ran := make(chan struct{})
		d.Schedule(func() { <-hold })
		d.Schedule(func() { close(ran) })
		select {
		case <-ran:
		case <-time.After(testwait.Hang):
			close(hold)
			t.Fatalf("try %d: the second job never ran while the first held the idle worker", try)
		}
		close(hold)
		d.close()
	}
}
