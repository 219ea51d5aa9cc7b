package serve

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// TestCork: what is written to a corked socket stays in mm until uncork,
// which writes it all, in order, in one write; uncorked, writes go through.
func TestCork(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	sc := &stallConn{Conn: a, stall: time.Minute}
	sc.cork()
	for _, frame := range []string{"one", "two", "three"} {
		if n, err := sc.Write([]byte(frame)); n != len(frame) || err != nil {
			t.Fatalf("corked write: %d %v", n, err)
		}
	}
	// Nothing reached the peer: a read finds nothing before its deadline.
	_ = b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, _ := b.Read(make([]byte, 16)); n != 0 {
		t.Fatalf("%d bytes went out while corked", n)
	}
	_ = b.SetReadDeadline(time.Time{})
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 64)
		n, _ := b.Read(buf) // net.Pipe: one Read per Write
		got <- buf[:n]
	}()
	if err := sc.uncork(); err != nil {
		t.Fatal(err)
	}
	if g := <-got; !bytes.Equal(g, []byte("onetwothree")) {
		t.Fatalf("one write of %q, want the three frames in order", g)
	}
	go func() { _, _ = sc.Write([]byte("after")) }()
	buf := make([]byte, 16)
	if n, err := io.ReadFull(b, buf[:5]); err != nil || string(buf[:n]) != "after" {
		t.Fatalf("uncorked write: %q %v", buf[:n], err)
	}
}
