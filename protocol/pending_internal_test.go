package protocol

import (
	"testing"
	"time"
)

// TestDrainWaitsForASlowAnswer: at the end of a connection, mm writing
// nothing for a while is no sign that the client stopped reading. An
// answer that comes after more than a second of silence (a loaded
// machine) is still waited for, while the client's writes go through;
// only a write that does not return, or silence for the hang bound, ends
// the wait.
func TestDrainWaitsForASlowAnswer(t *testing.T) {
	reads := func() bool { return false }
	p := newPending(4)
	p.take(nil)
	go func() {
		time.Sleep(1500 * time.Millisecond) // longer than the second the drain used to allow
		p.give(1)
	}()
	if got := p.drain(reads, time.Minute); got != drainDone {
		t.Errorf("a slow answer: drain ended %d, want every request answered", got)
	}

	p = newPending(4)
	p.take(nil)
	if got := p.drain(func() bool { return true }, time.Minute); got != drainStuck {
		t.Errorf("a client whose write does not return: drain ended %d, want stuck", got)
	}
	p = newPending(4)
	p.take(nil)
	if got := p.drain(reads, time.Second); got != drainSilent {
		t.Errorf("no answer for the hang bound: drain ended %d, want silent", got)
	}
}

// TestStuckIsAWriteThatDoesNotReturn: the writer tells a client that does
// not read (a write waiting on it) from one between writes.
func TestStuckIsAWriteThatDoesNotReturn(t *testing.T) {
	block := make(chan struct{})
	l := &lockedWriter{w: writerFunc(func(b []byte) (int, error) { <-block; return len(b), nil })}
	if l.stuck(0) {
		t.Error("stuck before any write")
	}
	go func() { _, _ = l.Write([]byte("x\n")) }()
	for !l.stuck(0) {
		time.Sleep(time.Millisecond)
	}
	if l.stuck(time.Hour) {
		t.Error("a write that began just now counts as stuck for an hour")
	}
	close(block)
	for l.stuck(0) {
		time.Sleep(time.Millisecond)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestTakeGivesUpAtTheEnd: a request waiting for a place stops waiting
// once the client's stream has ended, when the source says so; with no
// such word it waits for a place.
func TestTakeGivesUpAtTheEnd(t *testing.T) {
	p := newPending(1)
	p.take(nil)
	ended := make(chan struct{})
	took := make(chan bool, 1)
	go func() { took <- p.take(ended) }()
	select {
	case <-took:
		t.Fatal("a place was taken while none was free")
	case <-time.After(100 * time.Millisecond):
	}
	close(ended)
	select {
	case ok := <-took:
		if ok {
			t.Error("a place was taken while none was free, the stream over")
		}
	case <-time.After(time.Minute):
		t.Fatal("the wait did not end with the stream")
	}
	if p.count() != 1 {
		t.Errorf("%d places taken, want 1", p.count())
	}
	go func() { took <- p.take(nil) }()
	p.give(1)
	if ok := <-took; !ok || p.count() != 1 {
		t.Errorf("a wait with no end to watch: took %v, %d places taken", ok, p.count())
	}
}
