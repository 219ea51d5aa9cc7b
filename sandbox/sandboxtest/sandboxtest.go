// Package sandboxtest gives tests the machine's bubblewrap sandbox, or
// skips them saying why, or fails them where it must be there
// (MM_REQUIRE_BWRAP=1, which .ci/run sets after installing bubblewrap).
package sandboxtest

import (
	"os"
	"testing"

	"github.com/mm-agent/mm/sandbox"
)

// RequireEnv, set to 1, makes a missing bubblewrap fail the tests that
// need it instead of skipping them.
const RequireEnv = "MM_REQUIRE_BWRAP"

// Bubblewrap returns a sandbox that confines with bubblewrap, or ends the
// test: skipped, saying why, or failed with RequireEnv=1.
func Bubblewrap(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	sb := sandbox.Detect()
	if sb.Kind() == sandbox.Bubblewrap {
		return sb
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s, and %s=1", sb.Why(), RequireEnv)
	}
	t.Skip(sb.Why())
	return nil
}
