package store

import (
	"errors"
	"sync"
)

// Writer persists one session in the background, so that the session actor
// never waits for the disk or the database. It keeps at most one pending
// encoding: a session is rewritten whole each time, so when saves arrive
// faster than the backend takes them, only the latest one is worth writing.
//
// A write that fails with ErrFenced (another activation of the session
// saved it meanwhile, Postgres only) ends the writer's saving: it writes
// nothing more, and every later Save calls its done at once, as after Close.
type Writer struct {
	onError func(error)
	// write stores one encoding: WriteAtomic to the session's path, or a
	// fenced save in Postgres; tests replace it to observe or stall writes.
	write func(data []byte) error

	mu      sync.Mutex
	data    []byte   // the latest queued data, when queued is true
	queued  bool     // data waits to be written
	dones   []func() // done funcs of the queued saves, in Save order
	closing bool     // Close was called; Save no longer queues
	fenced  bool     // a write was fenced; Save no longer queues

	wake chan struct{} // capacity 1: "there is work, or Close was called"
	done chan struct{} // closed when the goroutine has exited
}

// NewWriter starts the goroutine that writes the file at path. onError,
// which may be nil, is called from that goroutine with every failed write.
func NewWriter(path string, onError func(error)) *Writer {
	return newWriter(path, onError, WriteAtomic)
}

func newWriter(path string, onError func(error), write func(string, []byte) error) *Writer {
	return StartWriter(func(data []byte) error { return write(path, data) }, onError)
}

// StartWriter starts a Writer that stores each encoding with write, which
// is called from the Writer's goroutine only, one call at a time: the
// Writer of a Backend other than the file store (Postgres's fenced saves),
// or of a test. A write error wrapping ErrFenced stops its saving.
func StartWriter(write func([]byte) error, onError func(error)) *Writer {
	w := &Writer{
		onError: onError,
		write:   write,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go w.run()
	return w
}

// Save queues data to be written and returns at once. data must not be
// modified afterwards. done, which may be nil, is called from the writer's
// goroutine once a write covering data has completed or failed (failures
// also go to onError); done funcs are called in Save order, and must not
// block for long since later writes wait for them. When several saves are
// queued while a write is in progress, only the last data is written.
// After Close, or once a write was fenced, Save writes nothing and calls
// done at once, from the calling goroutine.
func (w *Writer) Save(data []byte, done func()) {
	w.mu.Lock()
	if w.closing || w.fenced {
		w.mu.Unlock()
		if done != nil {
			done()
		}
		return
	}
	w.data, w.queued = data, true
	if done != nil {
		w.dones = append(w.dones, done)
	}
	w.mu.Unlock()
	w.signal()
}

// Close writes what is queued, stops the goroutine and returns once it has
// exited. It may be called more than once, from any goroutine; every call
// waits for the same end.
func (w *Writer) Close() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.signal()
	<-w.done
}

// Done returns a channel closed when the writer's goroutine has exited,
// which happens only after Close, once the queued data is written.
func (w *Writer) Done() <-chan struct{} { return w.done }

// signal wakes the goroutine without ever blocking: a pending wake-up
// already covers whatever was queued since.
func (w *Writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Writer) run() {
	defer close(w.done)
	for range w.wake {
		for {
			w.mu.Lock()
			data, queued, dones, closing, fenced := w.data, w.queued, w.dones, w.closing, w.fenced
			w.data, w.queued, w.dones = nil, false, nil
			w.mu.Unlock()
			if !queued {
				if closing {
					return
				}
				break
			}
			if !fenced {
				err := w.write(data)
				if errors.Is(err, ErrFenced) {
					// What is queued behind a fenced write would be
					// fenced too: it is dropped, and nothing more is
					// taken.
					w.mu.Lock()
					w.fenced = true
					w.mu.Unlock()
				}
				if err != nil && w.onError != nil {
					w.onError(err)
				}
			}
			for _, d := range dones {
				d()
			}
		}
	}
}
