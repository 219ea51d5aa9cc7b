package connect

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine of a bridge ends with it: its two read loops, the
// pinger, a resume, the drain.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
