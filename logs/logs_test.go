package logs

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestLines(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, slog.LevelInfo)
	l.Info("[acp] turn done: 1 command(s)")
	l.Debug("hidden")
	l.With("lib", "acp").Warn("connection closed", "cause", "peer gone")
	want := "[acp] turn done: 1 command(s)\nWARN: connection closed lib=acp cause=\"peer gone\"\n"
	if buf.String() != want {
		t.Errorf("got %q\nwant %q", buf.String(), want)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  int
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	return l.b.Write(p)
}

// TestBatchWriter: every line arrives, whole and in order, in fewer writes
// than lines under a burst, and Close flushes.
func TestBatchWriter(t *testing.T) {
	var out lockedBuffer
	w := NewBatchWriter(&out)
	l := New(w, slog.LevelInfo)
	var want strings.Builder
	for i := 0; i < 2000; i++ {
		l.Info("line", "i", i)
		want.WriteString("line i=" + itoa(i) + "\n")
	}
	w.Close()
	if out.b.String() != want.String() {
		t.Fatal("lines lost or reordered")
	}
	if out.n >= 2000 {
		t.Errorf("%d writes for 2000 lines", out.n)
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}
