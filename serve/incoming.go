package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// incoming bounds what the server holds of client messages still being
// read: every message, over every connection and both transports, takes
// its bytes from one room (serve.maxIncomingBytes) as they arrive, and
// gives them back once it is handed to mm (whose connection then bounds
// what it holds). A message that finds no room waits for it, within its
// time limit (serve.messageTimeout), first come, first served; a message
// longer than serve.maxMessageBytes takes no room past that: it is read to
// its end and dropped. So neither a crowd of large messages nor one that
// never ends can take the server's memory: a message that never ends is
// cut at its time limit.
type incoming struct {
	room *semaphore.Weighted
	// held is the room taken now (mm_incoming_bytes).
	held atomic.Int64
}

func newIncoming(n int64) *incoming { return &incoming{room: semaphore.NewWeighted(n)} }

// chunk is how much of a message is read, and taken from the room, at a
// time.
const chunk = 64 << 10

// errNoRoom ends a message that waited for room past its time limit.
var errNoRoom = errors.New("no room for the message in serve.maxIncomingBytes within serve.messageTimeout")

// read reads one message from r, at most max bytes; it waits for room
// until deadline (the message's time limit). A longer one is read to its end and dropped: only its size and
// its first headBytes are kept, to answer with its id. release gives the
// message's bytes back: call it once the message is handed over (always,
// whatever err).
func (in *incoming) read(deadline time.Time, r io.Reader, max int) (msg, head []byte, size int, release func(), err error) {
	var held int64
	release = func() {
		if held > 0 {
			in.give(held)
			held = 0
		}
	}
	var b bytes.Buffer
	for b.Len() <= max {
		want := int64(min(chunk, max+1-b.Len()))
		if err := in.acquire(deadline, want); err != nil {
			return nil, nil, 0, release, fmt.Errorf("%w (%v)", errNoRoom, err)
		}
		held += want
		k, rerr := b.ReadFrom(io.LimitReader(r, want))
		if k < want {
			in.give(want - k)
			held -= want - k
		}
		switch {
		case rerr != nil:
			return nil, nil, 0, release, rerr
		case k < want: // the message ended
			return b.Bytes(), nil, b.Len(), release, nil
		}
	}
	// Longer than max: its head is kept, the rest read to its end.
	head = bytes.Clone(b.Bytes()[:min(b.Len(), headBytes)])
	n := b.Len()
	b = bytes.Buffer{}
	release()
	rest, err := io.Copy(io.Discard, r)
	return nil, head, n + int(rest), release, err
}

// acquire takes n bytes of room, waiting for them until deadline when
// there are none (or others wait first): the wait, not every message,
// pays for its context.
func (in *incoming) acquire(deadline time.Time, n int64) error {
	if !in.room.TryAcquire(n) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := in.room.Acquire(ctx, n); err != nil {
			return err
		}
	}
	in.held.Add(n)
	return nil
}

// give gives n bytes of room back.
func (in *incoming) give(n int64) {
	in.held.Add(-n)
	in.room.Release(n)
}
