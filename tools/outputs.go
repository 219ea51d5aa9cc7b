package tools

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/mm-agent/mm/internal/procs"
)

// The folders of whole outputs live under the system's temporary folder:
// OutputsRoot/<mm's pid>/<session>-<random>, each made on its first cut
// output (0700) and removed with its session. A folder whose mm is gone
// (killed before it could remove it) is removed by the next mm that starts
// (SweepOutputs). A confined command of a session sees its own folder and
// none of the others (sandbox.Policy's Readable and Hidden).

// OutputsRoot is the folder of every mm's session output folders, this
// user's: one per user, so that one user's never blocks another's.
func OutputsRoot() string {
	name := "mm-outputs"
	if uid := os.Getuid(); uid >= 0 {
		name += "-" + strconv.Itoa(uid)
	}
	return filepath.Join(os.TempDir(), name)
}

// NewOutputDir names a new session's folder of whole outputs, in this
// process's (it is made when first used).
func NewOutputDir(sessionID string) string {
	return filepath.Join(OutputsRoot(), strconv.Itoa(os.Getpid()), filepath.Base(sessionID)+"-"+rand.Text()[:8])
}

var sweepOnce sync.Once

// SweepOutputs removes, once per process, the folders that mm processes
// now gone left in OutputsRoot. It is cheap (a folder listing) and may run
// on any goroutine.
func SweepOutputs() {
	sweepOnce.Do(func() {
		root := OutputsRoot()
		entries, err := os.ReadDir(root)
		if err != nil {
			return
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() || procs.Alive(pid) {
				continue
			}
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
		}
	})
}
