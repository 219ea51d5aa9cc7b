package logs

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/mm-agent/mm/internal/syncbuf"
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

// TestBatchWriter: every line arrives, whole and in order, in fewer writes
// than lines under a burst, and Close flushes.
func TestBatchWriter(t *testing.T) {
	var out syncbuf.Buffer
	w := NewBatchWriter(&out)
	l := New(w, slog.LevelInfo)
	var want strings.Builder
	for i := 0; i < 2000; i++ {
		l.Info("line", "i", i)
		want.WriteString("line i=" + itoa(i) + "\n")
	}
	w.Close()
	if out.String() != want.String() {
		t.Fatal("lines lost or reordered")
	}
	if out.Writes() >= 2000 {
		t.Errorf("%d writes for 2000 lines", out.Writes())
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
