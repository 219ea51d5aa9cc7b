//go:build !windows

package store

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// plantSpecial adds a FIFO and a link to /dev/zero to a sessions folder:
// files a repository's archive can carry, that a reader must not wait on
// or read whole.
func plantSpecial(t *testing.T, root string, refused map[string]string) map[string]string {
	t.Helper()
	if err := syscall.Mkfifo(filepath.Join(root, "20260916-101530-fifo.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused["20260916-101530-fifo"] = "a named pipe"
	if err := os.Symlink("/dev/zero", filepath.Join(root, "20260916-101530-zero.json")); err != nil {
		t.Fatal(err)
	}
	refused["20260916-101530-zero"] = "a symbolic link"
	return refused
}
