// Package testwait holds the one bound the tests put on a hang.
//
// A test asserts outcomes, never speed (docs/benchmarks.md): it may bound
// a wait so that a hang fails with what it was waiting for, but the bound
// is far above a normal run on a loaded 2-core machine with an empty build
// cache, so that only a hang reaches it. Where a behaviour is itself a time
// limit (a timeout in the config), the test drives it with a peer that never
// answers, so that the limit is the only way out, and asserts the outcome.
package testwait

import (
	"context"
	"testing"
	"time"
)

// Hang is how long a test waits for something that should happen before it
// decides that it never will.
const Hang = 3 * time.Minute

// Context is a context that ends when the test does, or after Hang.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Hang)
	t.Cleanup(cancel)
	return ctx
}

// Short skips t under `go test -short`, the inner loop's quick mode, saying
// what it leaves out.
func Short(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short leaves out " + what)
	}
}
