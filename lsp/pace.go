package lsp

import (
	"fmt"
	"io"
	"time"
)

// floodWindows is how many seconds in a row a server may keep a budget
// full: a burst is only slowed, but a server that fills this many is not
// bursting but flooding, and is stopped.
const floodWindows = 10

// budget bounds what mm reads of a server in a second (messages, bytes), so
// that what the server writes costs a bounded share of a core: once a
// second's budget is spent, the reader waits for the next second, and the
// server, its pipe full, waits too. One goroutine uses a budget.
type budget struct {
	msgs, bytes int64  // a second's budget; 0 is no bound
	of          string // what is read, for the reason: "", " of stderr"
	// closed ends a wait at once, for a reader being closed.
	closed <-chan struct{}

	window           time.Time // when the current second began
	usedMsgs, usedBy int64     // what it took
	full             int       // seconds filled in a row
}

// spend counts what was read.
func (b *budget) spend(msgs, bytes int64) {
	b.usedMsgs += msgs
	b.usedBy += bytes
}

// wait returns at once while this second's budget lasts; once it is spent,
// it waits for the next second, and returns why the server is flooding
// once floodWindows seconds in a row were full. A closed budget returns
// io.ErrClosedPipe.
func (b *budget) wait() (flood string, err error) {
	now := time.Now()
	if now.Sub(b.window) >= time.Second {
		// A second went by without the server spending the budget.
		b.window, b.usedMsgs, b.usedBy, b.full = now, 0, 0, 0
		return "", nil
	}
	msgsFull := b.msgs > 0 && b.usedMsgs >= b.msgs
	if !msgsFull && (b.bytes == 0 || b.usedBy < b.bytes) {
		return "", nil
	}
	b.full++
	if b.full >= floodWindows {
		what := fmt.Sprintf("%d MiB", b.bytes>>20)
		if msgsFull {
			what = fmt.Sprintf("%d messages", b.msgs)
		}
		return fmt.Sprintf("over %s%s a second for %ds", what, b.of, floodWindows), nil
	}
	t := time.NewTimer(b.window.Add(time.Second).Sub(now))
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.closed:
		return "", io.ErrClosedPipe
	}
	b.window, b.usedMsgs, b.usedBy = time.Now(), 0, 0
	return "", nil
}
