// Package sandboxtest gives tests the machine's bubblewrap sandbox, or
// skips them saying why, or fails them where it must be there
// (MM_REQUIRE_BWRAP=1, which .ci/run sets after installing bubblewrap).
package sandboxtest

import (
	"os"
	"path/filepath"
	"strings"
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

// Tenant is whom the tests' confined commands run as: nobody when the tests
// run as root (mm refuses to run a confined command as root), mm's own
// user otherwise (nil).
func Tenant() *sandbox.Ident {
	if os.Geteuid() != 0 {
		return nil
	}
	return &sandbox.Ident{UID: 65534, GID: 65534, Name: "nobody"}
}

// Own gives path, and what it holds, to Tenant when the tests run as root,
// and lets anyone search the folder that holds it (t.TempDir's is root's
// alone), so that a confined command may work there. It returns path.
func Own(t testing.TB, path string) string {
	t.Helper()
	u := Tenant()
	if u == nil {
		return path
	}
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(path, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(u.UID), int(u.GID))
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Reachable returns a program the tenant may run: program itself, or, when
// the tests run as root and it lives where the tenant cannot reach it
// (~/go/bin of root), a copy in a temporary folder of the test's.
func Reachable(t testing.TB, program string) string {
	t.Helper()
	if Tenant() == nil || !strings.HasPrefix(program, "/root/") {
		return program
	}
	b, err := os.ReadFile(program)
	if err != nil {
		t.Fatal(err)
	}
	dir := Own(t, t.TempDir())
	copied := filepath.Join(dir, filepath.Base(program))
	if err := os.WriteFile(copied, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return copied
}
