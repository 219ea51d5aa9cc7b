package logs

import (
	"io"
	"sync"
)

// BatchWriter hands writes to a goroutine that writes whatever has
// gathered in one call. Under load (a log line per turn, thousands of turns
// a second; a harness's requests) that is one write per burst instead of
// one per line; when idle, a line goes out at once. Close writes what is
// left. The bytes of one Write stay together, in order.
type BatchWriter struct {
	w      io.Writer
	mu     sync.Mutex
	buf    []byte
	wake   chan struct{}
	closed chan struct{}
	done   chan struct{}
}

// maxPending is how much may wait; past it, Write writes itself.
const maxPending = 1 << 20

// NewBatchWriter starts the writer's goroutine.
func NewBatchWriter(w io.Writer) *BatchWriter {
	b := &BatchWriter{w: w, wake: make(chan struct{}, 1), closed: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// Write queues p; it never waits for the underlying writer unless a
// megabyte is already waiting.
func (b *BatchWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	if len(b.buf)+len(p) > maxPending {
		pending := b.buf
		b.buf = nil
		b.mu.Unlock()
		_, _ = b.w.Write(pending)
		return b.w.Write(p)
	}
	b.buf = append(b.buf, p...)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (b *BatchWriter) run() {
	defer close(b.done)
	var spare []byte
	for {
		select {
		case <-b.wake:
		case <-b.closed:
			b.flush(&spare)
			return
		}
		b.flush(&spare)
	}
}

func (b *BatchWriter) flush(spare *[]byte) {
	b.mu.Lock()
	out := b.buf
	b.buf = (*spare)[:0]
	b.mu.Unlock()
	if len(out) > 0 {
		_, _ = b.w.Write(out)
	}
	*spare = out
}

// Close writes what is pending and stops the goroutine.
func (b *BatchWriter) Close() error {
	select {
	case <-b.closed:
	default:
		close(b.closed)
	}
	<-b.done
	return nil
}
