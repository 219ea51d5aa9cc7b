package protocol

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/mm-agent/mm/logs"
)

// TestQuietEOF: of the SDK's log lines, only the one about a client that
// closed its side is dropped; a close for another cause and every other
// line are kept.
func TestQuietEOF(t *testing.T) {
	var b strings.Builder
	log := slog.New(quietEOF{logs.New(&b, slog.LevelDebug).Handler()}).With("lib", "acp")
	log.Info("connection closed", "cause", "peer connection closed")
	log.Info("connection closed", "cause", "read |0: file already closed")
	log.Error("failed to handle notification", "method", "x", "err", "boom")
	want := "connection closed lib=acp cause=\"read |0: file already closed\"\n" +
		"ERROR: failed to handle notification lib=acp method=x err=boom\n"
	if b.String() != want {
		t.Errorf("logged:\n%s\nwant:\n%s", b.String(), want)
	}
}
