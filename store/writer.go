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
	// check says whether this writer still holds its session (Check); nil
	// for a backend that does not fence (files): always.
	check func() error

	mu      sync.Mutex
	data    []byte        // the latest queued data, when queued is true
	queued  bool          // data waits to be written
	dones   []func(error) // done funcs of the queued saves, in Save order
	checks  []func(error) // Check's funcs, answered after the queued saves
	closing bool          // Close was called; Save no longer queues
	fenced  bool          // a write was fenced; Save no longer queues

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
	return startWriter(write, nil, onError)
}

func startWriter(write func([]byte) error, check func() error, onError func(error)) *Writer {
	w := &Writer{
		onError: onError,
		write:   write,
		check:   check,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go w.run()
	return w
}

// Save queues data to be written and returns at once. data must not be
// modified afterwards. done, which may be nil, is called from the writer's
// goroutine once a write covering data has completed or failed, with that
// write's error (failures also go to onError): a caller that promised
// its user the data is kept learns here whether it was. done funcs are
// called in Save order, and must not block for long since later writes
// wait for them. When several saves are queued while a write is in
// progress, only the last data is written. After Close, or once a write
// was fenced, Save writes nothing and calls done at once, from the calling
// goroutine, with ErrClosed or ErrFenced.
func (w *Writer) Save(data []byte, done func(error)) {
	w.mu.Lock()
	if w.closing || w.fenced {
		err := w.stoppedErr()
		w.mu.Unlock()
		if done != nil {
			done(err)
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

// Check calls done, from the writer's goroutine and after the saves queued
// before it, with nil when this writer still holds its session: no other
// activation saved or deleted it since this one's last save (Postgres);
// with an error wrapping ErrFenced when one did, or with the backend's
// error when that cannot be known (the database is unreachable). Files are
// not fenced: their writers always hold. A session checks before each turn
// and each replay, so that it never runs a turn on, or replays, a copy
// older than the store (a second node that served the session meanwhile,
// during a partition).
func (w *Writer) Check(done func(error)) {
	w.mu.Lock()
	if w.closing || w.fenced {
		err := w.stoppedErr()
		w.mu.Unlock()
		done(err)
		return
	}
	w.checks = append(w.checks, done)
	w.mu.Unlock()
	w.signal()
}

// Fences says whether Check asks the backend (Postgres); a file's writer
// always holds, and its session need not ask.
func (w *Writer) Fences() bool { return w.check != nil }

// stoppedErr is why a closed or fenced writer takes nothing; w.mu is held.
func (w *Writer) stoppedErr() error {
	if w.fenced {
		return ErrFenced
	}
	return ErrClosed
}

// ErrClosed is what a Writer answers once closed.
var ErrClosed = errors.New("the session's writer is closed")

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
			data, queued, dones, checks, closing, fenced := w.data, w.queued, w.dones, w.checks, w.closing, w.fenced
			w.data, w.queued, w.dones, w.checks = nil, false, nil, nil
			w.mu.Unlock()
			if !queued && len(checks) == 0 {
				if closing {
					return
				}
				break
			}
			if queued {
				err := ErrFenced
				if !fenced {
					err = w.write(data)
					fenced = w.stopIfFenced(err)
					if err != nil && w.onError != nil {
						w.onError(err)
					}
				}
				for _, d := range dones {
					d(err)
				}
			}
			if len(checks) > 0 {
				err := ErrFenced
				if !fenced && w.check == nil {
					err = nil
				} else if !fenced {
					err = w.check()
					w.stopIfFenced(err)
				}
				for _, d := range checks {
					d(err)
				}
			}
		}
	}
}

// stopIfFenced stops the writer's saving when err says that another
// activation holds the session: what is queued behind would be fenced too,
// and is dropped. It says whether it did.
func (w *Writer) stopIfFenced(err error) bool {
	if !errors.Is(err, ErrFenced) {
		return false
	}
	w.mu.Lock()
	w.fenced = true
	w.mu.Unlock()
	return true
}
