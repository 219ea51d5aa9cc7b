package llm_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: a stream
// reader, a relay or an HTTP connection that outlives its call.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
