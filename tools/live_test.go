package tools

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestLiveTailKeepsTheEnd: past LiveOutputBytes the view is the end of the
// output, cut at a character boundary, under a line that says so.
func TestLiveTailKeepsTheEnd(t *testing.T) {
	var l liveTail
	l.Write([]byte("short\n"))
	if text, total := l.snapshot(); text != "short\n" || total != 6 {
		t.Fatalf("%q, %d", text, total)
	}
	for range 100 {
		l.Write([]byte(strings.Repeat("é", 1000) + "x")) // 2,001 bytes, odd: the cut falls inside a character
	}
	text, total := l.snapshot()
	header, tail, _ := strings.Cut(text, "\n")
	if total != 6+100*2001 || !strings.HasPrefix(header, "[the last ") || !strings.HasSuffix(header, " bytes of 200106 so far]") {
		t.Errorf("header %q, total %d", header, total)
	}
	if len(tail) > LiveOutputBytes || len(tail) < LiveOutputBytes-utf8.UTFMax || !utf8.ValidString(tail) || !strings.HasSuffix(tail, "éx") {
		t.Errorf("tail of %d bytes, valid %t", len(tail), utf8.ValidString(tail))
	}
}

// TestShowLiveStops: views come while the output grows, none once it
// stops growing, and none after stop returns.
func TestShowLiveStops(t *testing.T) {
	var l liveTail
	var views atomic.Int32
	stop := showLive(&l, func(string) { views.Add(1) })
	l.Write([]byte("a"))
	// The first view comes at a tick, however late a loaded machine runs
	// it; then the unchanged output gets no more (a slow machine can only
	// hide an extra view, never invent one).
	for deadline := time.Now().Add(testwait.Hang); views.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no view of the output in %v", testwait.Hang)
		}
	}
	time.Sleep(3 * LiveOutputEvery)
	if n := views.Load(); n != 1 {
		t.Errorf("%d views of one unchanged output, want 1", n)
	}
	l.Write([]byte("b"))
	stop()
	after := views.Load()
	time.Sleep(2 * LiveOutputEvery)
	if views.Load() != after {
		t.Error("a view came after stop returned")
	}
}
