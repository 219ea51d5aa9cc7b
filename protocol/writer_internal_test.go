package protocol

import (
	"testing"
	"time"

	"github.com/mm-agent/mm/jsonrpc"
)

// TestStuckIsAWriteThatDoesNotReturn: the writer tells a client that does
// not read (a write waiting on it) from one between writes.
func TestStuckIsAWriteThatDoesNotReturn(t *testing.T) {
	block := make(chan struct{})
	l := &watchedWriter{w: writerFunc(func(jsonrpc.Out) error { <-block; return nil })}
	if l.stuck(0) {
		t.Error("stuck before any write")
	}
	go func() { _ = l.Write(jsonrpc.Out{Data: []byte("x")}) }()
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

type writerFunc func(jsonrpc.Out) error

func (f writerFunc) Write(o jsonrpc.Out) error { return f(o) }
