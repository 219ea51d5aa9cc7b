package tools

import (
	"fmt"
	"sync"
	"time"
)

// While bash runs, its tool call shows the output so far: Env.Progress gets
// the last LiveOutputBytes at most every LiveOutputEvery, when there is
// something new. The final result still carries the whole output.
const (
	LiveOutputBytes = 64 << 10
	LiveOutputEvery = 200 * time.Millisecond
)

// liveTail keeps the last LiveOutputBytes of a command's output for the
// live view. The pipe's reader writes to it while the ticker reads it.
type liveTail struct {
	mu    sync.Mutex
	buf   []byte
	total int64
}

func (l *liveTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.total += int64(len(p))
	l.buf = append(l.buf, p...)
	// Compacted at twice the size: amortised O(1) per byte.
	if len(l.buf) > 2*LiveOutputBytes {
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-LiveOutputBytes:]...)
	}
	l.mu.Unlock()
	return len(p), nil
}

// snapshot returns the output so far as the live view shows it, and how
// many bytes were written in all.
func (l *liveTail) snapshot() (string, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf
	if len(b) <= LiveOutputBytes && l.total == int64(len(b)) {
		return string(b), l.total
	}
	tail := string(b[max(0, len(b)-LiveOutputBytes):])
	tail = tail[validSuffixStart(tail, LiveOutputBytes):]
	return fmt.Sprintf("[the last %d bytes of %d so far]\n", len(tail), l.total) + tail, l.total
}

// showLive calls progress with the live view every LiveOutputEvery while
// the output grows, until the returned stop is called; stop returns once
// the last call is over, so no view follows the result.
func showLive(live *liveTail, progress func(string)) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(LiveOutputEvery)
		defer tick.Stop()
		var shown int64
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if text, total := live.snapshot(); total != shown {
				shown = total
				progress(text)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
