package tools

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: Run
// promises to join everything it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
