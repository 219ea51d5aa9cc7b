package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/jsonrpc"
)

// incoming bounds what the server holds of client messages, from their
// first byte until mm's reader is done with them: every message, over
// every connection and both transports, takes its room from one
// (serve.maxIncomingBytes) as it arrives, and holds it until mm's ingress
// asks for the connection's next message, the one before it answered or
// handed on, decoded (inbox.go). A message's room is:
//
//   - its buffer, as it grows (a message is read into one buffer, grown by
//     doubling, whose capacity is charged);
//   - what decoding it may allocate (jsonrpc.DecodeBytes): its bytes two
//     and a half times, and jsonrpc.ValueBytes for each of its JSON
//     values, counted as they arrive.
//
// A message of a known length (a POST's Content-Length) has a buffer of
// that length, and takes it and its bytes' decoding at once, before its
// bytes come; only its values are counted as they arrive.
//
// A message that finds no room waits for it, within its time limit
// (serve.messageTimeout): as room comes back it goes to the oldest message
// waiting that it is enough for; a message that holds no room yet does
// not begin while messages holding room wait for more. When every message
// holding room waits for more and none can have it, none would ever end:
// the youngest of them gives its room up at once, and is read to its end
// and dropped, its client told to send it again. So is a message longer
// than serve.maxMessageBytes, or whose room would pass the whole room
// (its client told why). So neither a crowd of large messages nor one that
// never ends can take the server's memory: a message that never ends is
// cut at its time limit.
//
// What the room gives back, and a buffer left behind as it grew, is
// garbage that Go's collector would let pile up to the size of the heap
// before it collects (GOGC): once a quarter of the room has been given
// back, incoming asks for a collection, so that what messages held is
// reused before the heap grows for new ones.
type incoming struct {
	size int64

	mu      sync.Mutex
	free    int64
	waiting []*ask // oldest message first
	// holders are the messages that hold room; stuck those of them that
	// wait for more.
	holders, stuck int
	ages           uint64 // the last message's number

	// held is the room taken now (mm_incoming_bytes).
	held atomic.Int64
	// freed is what was given back, or left behind, since the last
	// collection asked for; collecting is set while one runs.
	freed      atomic.Int64
	collecting atomic.Bool
	// collections counts the collections asked for (the tests read it).
	collections atomic.Int64
}

// ask is a message waiting for n bytes of room.
type ask struct {
	h    *hold
	n    int64
	done chan error // nil: granted
}

func newIncoming(n int64) *incoming { return &incoming{size: n, free: n} }

// firstBytes is a message buffer's first capacity; it doubles from there.
const firstBytes = 512

// Errors of a message that is not read whole.
var (
	// errNoRoom ends a message that waited for room past its time limit.
	errNoRoom = errors.New("no room for the message in serve.maxIncomingBytes within serve.messageTimeout")
	// errStuck is the wait of the youngest message holding room when all
	// of them wait for more and none can have it: it is dropped.
	errStuck = errors.New("every message holding room waits for more")
)

// hold is the room one message holds. Its owner — the transport, then
// mm's inbox once it has taken the message — releases it once.
type hold struct {
	in  *incoming
	age uint64 // lower is older
	n   int64
}

// newHold is the room of a message beginning now.
func (in *incoming) newHold() *hold {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.ages++
	return &hold{in: in, age: in.ages}
}

// take adds n bytes to the hold, waiting for them until deadline, or
// until ctx ends (the reader's: its connection ends).
func (h *hold) take(ctx context.Context, deadline time.Time, n int64) error {
	if n <= 0 {
		return nil
	}
	err := h.in.take(ctx, h, n, deadline)
	if err != nil && ctx.Err() == nil && err != errStuck {
		return fmt.Errorf("%w (%v)", errNoRoom, err)
	}
	return err
}

// release gives the hold's room back; a nil hold holds nothing.
func (h *hold) release() {
	if h == nil {
		return
	}
	h.in.mu.Lock()
	n := h.n
	if n > 0 {
		h.n = 0
		h.in.holders--
		h.in.free += n
		h.in.grant()
	}
	h.in.mu.Unlock()
	if n > 0 {
		h.in.held.Add(-n)
		h.in.left(int(n))
	}
}

// take gives h n bytes, at once when there are, else once they come back,
// until deadline or ctx's end; in.mu is not held.
func (in *incoming) take(ctx context.Context, h *hold, n int64, deadline time.Time) error {
	in.mu.Lock()
	if in.may(h, n) {
		in.give(h, n)
		in.mu.Unlock()
		return nil
	}
	a := &ask{h: h, n: n, done: make(chan error, 1)}
	i := 0
	for i < len(in.waiting) && in.waiting[i].h.age < h.age {
		i++
	}
	in.waiting = append(in.waiting[:i], append([]*ask{a}, in.waiting[i:]...)...)
	if h.n > 0 {
		in.stuck++
	}
	in.unstick()
	in.mu.Unlock()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	why := context.DeadlineExceeded
	select {
	case err := <-a.done:
		return err
	case <-timer.C:
	case <-ctx.Done():
		why = ctx.Err()
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.remove(a) {
		return why
	}
	if err := <-a.done; err != nil { // answered meanwhile
		return err
	}
	return nil
}

// give gives h n bytes of the free room; in.mu is held.
func (in *incoming) give(h *hold, n int64) {
	if h.n == 0 {
		in.holders++
	}
	h.n += n
	in.free -= n
	in.held.Add(n)
}

// may says whether h may have n bytes now: there are, and h holds room
// already or no message holding room waits (one that begins while they
// wait would only take what they wait for). in.mu is held.
func (in *incoming) may(h *hold, n int64) bool {
	return n <= in.free && (h.n > 0 || in.stuck == 0)
}

// grant gives the room that came back to the messages waiting, oldest
// first, each that it is enough for; in.mu is held.
func (in *incoming) grant() {
	for granted := true; granted; {
		granted = false
		for _, a := range in.waiting {
			if in.may(a.h, a.n) {
				in.remove(a)
				in.give(a.h, a.n)
				a.done <- nil
				granted = true
				break
			}
		}
	}
	in.unstick()
}

// unstick ends the wait of the youngest message holding room when every
// message holding room waits for more and none can have it: none would
// ever end, each holding what the others wait for. in.mu is held.
func (in *incoming) unstick() {
	for in.holders > 0 && in.stuck == in.holders {
		var youngest *ask
		for _, a := range in.waiting {
			if in.may(a.h, a.n) {
				return // grant's to give
			}
			if a.h.n > 0 && (youngest == nil || a.h.age > youngest.h.age) {
				youngest = a
			}
		}
		// It fails, and gives its room back.
		in.remove(youngest)
		youngest.done <- errStuck
	}
}

// remove takes a out of the waiting, if it waits; in.mu is held.
func (in *incoming) remove(a *ask) bool {
	for i, w := range in.waiting {
		if w == a {
			in.waiting = append(in.waiting[:i], in.waiting[i+1:]...)
			if a.h.n > 0 {
				in.stuck--
			}
			return true
		}
	}
	return false
}

// read is one message read from its reader.
type read struct {
	// msg is the message, nil when it was not read whole.
	msg []byte
	// size is its size. msg is nil when it passes the limit; when heavy,
	// its room would pass the whole room (jsonrpc.DecodeBytes); when
	// crowded, it gave up its room to messages older than it, all of
	// them waiting for more. head is then its first headBytes, to answer
	// it with its id.
	size    int
	heavy   bool
	crowded bool
	head    []byte
	// hold is its room: the caller releases it, or hands it on.
	hold *hold
}

// read reads one message from r, at most limit bytes, of length known when
// known is not negative (a POST's Content-Length); it waits for room until
// deadline (the message's time limit), or until ctx ends. A longer one, or a heavy one, is
// read to its end and dropped. Whatever err, the caller releases m.hold
// (or hands it on with the message).
func (in *incoming) read(ctx context.Context, deadline time.Time, r io.Reader, limit int, known int64) (m read, err error) {
	h := in.newHold()
	m.hold = h
	var (
		buf     []byte
		values  jsonrpc.Values
		decoded int64 // the room taken for decoding buf
	)
	end := limit // the most the buffer grows to
	if known >= 0 && known <= int64(limit) {
		// Of a length known, its buffer and its bytes' decoding are taken
		// at once, before its bytes come: it does not wait for room with
		// room in hand, as one read piece by piece may (only its values
		// are counted as they come).
		end = int(known)
		decoded = jsonrpc.DecodeBytes(end, 0)
		if int64(end)+decoded > in.size {
			m.heavy = true
			return in.drop(m, nil, 0, r)
		}
		if err := h.take(ctx, deadline, int64(end)+decoded); err != nil {
			return m, err
		}
		buf = make([]byte, 0, end)
	}
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= end {
				// As long as it may be, or as it said: a byte more says
				// whether it goes on.
				var one [1]byte
				k, rerr := io.ReadAtLeast(r, one[:], 1)
				switch {
				case k == 0 && rerr == io.EOF:
					m.msg, m.size = whole(buf), len(buf)
					return m, nil
				case k == 0:
					return m, rerr
				case len(buf) < limit:
					return m, errors.New("the body is longer than its Content-Length")
				}
				return in.drop(m, buf, 1, r) // too long
			}
			want := min(max(2*cap(buf), firstBytes), end)
			if h.n+int64(want-cap(buf)) > in.size {
				m.heavy = true
				return in.drop(m, buf, 0, r)
			}
			if err := h.take(ctx, deadline, int64(want-cap(buf))); err == errStuck {
				m.crowded = true
				return in.drop(m, buf, 0, r)
			} else if err != nil {
				return m, err
			}
			grown := make([]byte, len(buf), want)
			copy(grown, buf)
			in.left(cap(buf)) // its room is the new buffer's now
			buf = grown
		}
		k, rerr := r.Read(buf[len(buf):cap(buf)])
		if k > 0 {
			_, _ = values.Write(buf[len(buf) : len(buf)+k])
			buf = buf[:len(buf)+k]
			if need := jsonrpc.DecodeBytes(len(buf), values.N()) - decoded; need > 0 {
				if h.n+need > in.size {
					m.heavy = true
					return in.drop(m, buf, 0, r)
				}
				if err := h.take(ctx, deadline, need); err == errStuck {
					m.crowded = true
					return in.drop(m, buf, 0, r)
				} else if err != nil {
					return m, err
				}
				decoded += need
			}
		}
		if rerr == io.EOF {
			m.msg, m.size = whole(buf), len(buf)
			return m, nil
		}
		if rerr != nil {
			return m, rerr
		}
	}
}

// whole is a message read whole: never nil, even when empty.
func whole(buf []byte) []byte {
	if buf == nil {
		return []byte{}
	}
	return buf
}

// drop reads the rest of a message too long or too heavy to its end: its
// head is kept, to answer it with its id, and its room given back. more
// bytes of it were read past buf.
func (in *incoming) drop(m read, buf []byte, more int, r io.Reader) (read, error) {
	m.head = append([]byte(nil), buf[:min(len(buf), headBytes)]...)
	n := len(buf) + more
	m.hold.release()
	rest, err := io.Copy(io.Discard, r)
	m.size = n + int(rest)
	return m, err
}

// left counts n bytes that messages no longer hold, and asks for a
// collection once they are a quarter of the room: one at a time, on a
// goroutine of its own (runtime.GC waits for the whole cycle).
func (in *incoming) left(n int) {
	if in.freed.Add(int64(n)) < in.size/4 || !in.collecting.CompareAndSwap(false, true) {
		return
	}
	in.freed.Store(0)
	in.collections.Add(1)
	go func() {
		defer in.collecting.Store(false)
		runtime.GC()
	}()
}

// unreadWhy says why a message read to its end was dropped, naming the
// key that bounds it.
func (s *Server) unreadWhy(m read) string {
	if m.crowded {
		return fmt.Sprintf("the server had no room for the message (serve.maxIncomingBytes, %s), all of it held by messages older than it waiting for more; send it again",
			configs.Bytes(s.o.MaxIncomingBytes))
	}
	if m.heavy {
		return fmt.Sprintf("the message would take more than serve.maxIncomingBytes (%s) to read and decode "+
			"(its bytes twice, and %d bytes for each JSON value in it); it was skipped", configs.Bytes(s.o.MaxIncomingBytes), jsonrpc.ValueBytes)
	}
	return fmt.Sprintf("the message is %d bytes, longer than serve.maxMessageBytes (%s); it was skipped", m.size, configs.Bytes(s.o.MaxMessageBytes))
}
