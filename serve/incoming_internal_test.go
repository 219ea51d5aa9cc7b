package serve

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/jsonrpc"
)

// TestReadCharges: a message holds, until released, its buffer's capacity
// (exactly its length when the length is known), its bytes once more for
// decoding, and jsonrpc.ValueBytes for each of its values; released, the
// room is whole again. A message longer than the limit, or whose room
// would pass the whole room, is read to its end and dropped, holding
// nothing.
func TestReadCharges(t *testing.T) {
	text := `{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"` + strings.Repeat("a", 100<<10) + `"}]}}`
	values := func(s string) int {
		var v jsonrpc.Values
		_, _ = v.Write([]byte(s))
		return v.N()
	}
	heavy := `{"jsonrpc":"2.0","id":8,"method":"x","params":[` + strings.Repeat(`{},`, 20<<10) + `0]}`
	for _, c := range []struct {
		name   string
		msg    string
		known  bool
		whole  bool
		heavy  bool
		oneBuf bool // its buffer is exactly its length
	}{
		{name: "of unknown length", msg: text, whole: true},
		{name: "of known length", msg: text, known: true, whole: true, oneBuf: true},
		{name: "empty", msg: "", whole: true},
		{name: "empty, of known length", msg: "", known: true, whole: true, oneBuf: true},
		{name: "too long", msg: text + strings.Repeat(" ", 200<<10)},
		{name: "too long, of known length", msg: text + strings.Repeat(" ", 200<<10), known: true},
		{name: "too heavy", msg: heavy, heavy: true},
	} {
		in := newIncoming(1 << 20)
		known := int64(-1)
		if c.known {
			known = int64(len(c.msg))
		}
		// One byte a read: the charge does not depend on how the bytes
		// come.
		m, err := in.read(context.Background(), time.Now().Add(time.Minute), iotest.HalfReader(strings.NewReader(c.msg)), 256<<10, known)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if m.size != len(c.msg) || m.heavy != c.heavy || (m.msg != nil) != c.whole {
			t.Errorf("%s: size %d heavy %v whole %v, want %d %v %v", c.name, m.size, m.heavy, m.msg != nil, len(c.msg), c.heavy, c.whole)
		}
		if !c.whole {
			if m.hold.n != 0 || in.held.Load() != 0 {
				t.Errorf("%s: dropped, it holds %d (the room %d)", c.name, m.hold.n, in.held.Load())
			}
			if !bytes.HasPrefix([]byte(c.msg), m.head) || len(m.head) != headBytes {
				t.Errorf("%s: its head is %d bytes, want its first %d", c.name, len(m.head), headBytes)
			}
			continue
		}
		if string(m.msg) != c.msg {
			t.Errorf("%s: read %d bytes, not the message", c.name, len(m.msg))
		}
		if c.oneBuf && cap(m.msg) != len(c.msg) {
			t.Errorf("%s: a buffer of %d for %d bytes", c.name, cap(m.msg), len(c.msg))
		}
		want := int64(cap(m.msg)) + jsonrpc.DecodeBytes(len(c.msg), values(c.msg))
		if m.hold.n != want || in.held.Load() != want {
			t.Errorf("%s: holds %d (the room %d), want %d: its buffer %d, its bytes %d, %d values", c.name, m.hold.n, in.held.Load(), want, cap(m.msg), len(c.msg), values(c.msg))
		}
		m.hold.release()
		m.hold.release() // once only
		if in.held.Load() != 0 || in.free != 1<<20 || in.holders != 0 {
			t.Errorf("%s: released, the room holds %d", c.name, in.held.Load())
		}
	}
}

// TestRoomCollects: once a quarter of the room has been given back, a
// collection is asked for.
func TestRoomCollects(t *testing.T) {
	in := newIncoming(1 << 20)
	for range 2 {
		m, err := in.read(context.Background(), time.Now().Add(time.Minute), strings.NewReader(`"`+strings.Repeat("a", 40<<10)+`"`), 1<<20, -1)
		if err != nil {
			t.Fatal(err)
		}
		m.hold.release()
	}
	if in.collections.Load() != 1 {
		t.Errorf("%d collections asked for, after two messages of 40 KiB (more than 128 KiB given back each) from a room of 1 MiB; want 1", in.collections.Load())
	}
}

// TestRoomToTheOldest: room that comes back goes to the oldest message
// waiting that it is enough for — a message near its end is not held
// behind one that began after it — and when every message holding room
// waits for more that none can have, the youngest gives up at once and
// the oldest goes on.
func TestRoomToTheOldest(t *testing.T) {
	in := newIncoming(100)
	later := time.Now().Add(time.Minute)
	old, young := in.newHold(), in.newHold()
	if err := old.take(context.Background(), later, 60); err != nil {
		t.Fatal(err)
	}
	if err := young.take(context.Background(), later, 30); err != nil {
		t.Fatal(err)
	}
	// The young one waits for 20 (10 are free); the old one, for 5, is
	// not held behind it.
	youngDone := make(chan error, 1)
	go func() { youngDone <- young.take(context.Background(), later, 20) }()
	waitWaiting(t, in, 1)
	if err := old.take(context.Background(), later, 5); err != nil {
		t.Fatalf("the oldest message, for 5 bytes of the 10 free: %v", err)
	}
	// Both wait now, the old one for 30, the young one for 20; 5 are
	// free: none can go on, and the young one gives up.
	oldDone := make(chan error, 1)
	go func() { oldDone <- old.take(context.Background(), later, 30) }()
	select {
	case err := <-youngDone:
		if err != errStuck {
			t.Fatalf("the youngest, stuck: %v, want errStuck", err)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("every message holding room waits, and none gave up")
	}
	young.release()
	select {
	case err := <-oldDone:
		if err != nil {
			t.Fatalf("the oldest, once the youngest gave its room back: %v", err)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the oldest did not go on once the youngest gave its room back")
	}
	if old.n != 95 || in.free != 5 {
		t.Errorf("the oldest holds %d, %d free; want 95 and 5", old.n, in.free)
	}
	old.release()
	if in.free != 100 || in.holders != 0 || in.stuck != 0 || len(in.waiting) != 0 {
		t.Errorf("all given back: free %d, holders %d, stuck %d, waiting %d", in.free, in.holders, in.stuck, len(in.waiting))
	}
}

func waitWaiting(t *testing.T, in *incoming, n int) {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for {
		in.mu.Lock()
		w := len(in.waiting)
		in.mu.Unlock()
		if w == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages wait, want %d", w, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadCrowded: a message that gives its room up to an older one, both
// waiting for more, is read to its end and dropped, its head kept to
// answer it; it holds nothing after, and the older one goes on.
func TestReadCrowded(t *testing.T) {
	in := newIncoming(64 << 10)
	later := time.Now().Add(time.Minute)
	old := in.newHold()
	if err := old.take(context.Background(), later, 40<<10); err != nil {
		t.Fatal(err)
	}
	msg := `{"jsonrpc":"2.0","id":9,"method":"x","params":{"pad":"` + strings.Repeat("a", 20<<10) + `"}}`
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte(msg))
		pw.Close()
	}()
	got := make(chan read, 1)
	go func() {
		m, err := in.read(context.Background(), later, pr, 1<<20, -1)
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	waitWaiting(t, in, 1) // the message, for more than is left
	oldDone := make(chan error, 1)
	go func() { oldDone <- old.take(context.Background(), later, 20<<10) }()
	m := <-got
	if !m.crowded || m.msg != nil || m.size != len(msg) || m.hold.n != 0 || !strings.HasPrefix(msg, string(m.head)) {
		t.Errorf("crowded %v, read whole %v, size %d (want %d), holds %d, head %.20q", m.crowded, m.msg != nil, m.size, len(msg), m.hold.n, m.head)
	}
	if err := <-oldDone; err != nil || old.n != 60<<10 {
		t.Errorf("the older message: %v, holds %d", err, old.n)
	}
	old.release()
}
