//go:build unix

package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSweepOutputs: the folders an mm now gone left are removed when the
// next one starts; a live mm's (this one's) are kept. A root that is not
// this user's own is not used.
func TestSweepOutputs(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	root := OutputsRoot()
	dead := filepath.Join(root, strconv.Itoa(gone.Process.Pid), "s-1")
	mine := NewOutputDir("s-2")
	for _, d := range []string{dead, mine} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	SweepOutputs()
	if _, err := os.Stat(filepath.Dir(dead)); !os.IsNotExist(err) {
		t.Errorf("the folder of a process that is gone is left: %v", err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("this process's folder was removed: %v", err)
	}

	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	got := Output{Budget: 1024, Dir: NewOutputDir("s-3")}.fit(lineText(500), commandHead)
	if want := "not kept (" + root + " is not this user's own folder)"; !strings.Contains(got, want) {
		t.Errorf("a root writable by others was used: %q", got)
	}
}
