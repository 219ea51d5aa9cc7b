package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mm-agent/mm/internal/tempfile"
)

// WriteAtomic replaces the file at path with data so that a process killed
// at any moment (or a machine losing power after WriteAtomic returned) leaves
// at path either the old complete file or the new complete one, never a
// torn mix.
//
// It creates path's directory if needed (mode 0o755), writes data to a
// temporary file in that same directory (named ".<name>.tmp-*", so that List
// never takes it for a session), flushes it to disk, renames it over path,
// and flushes the directory. The rename is what makes the replacement
// atomic: POSIX rename swaps the directory entry in one step, and it can
// only do so within one file system, hence the temporary file next to path
// rather than in os.TempDir. The first flush makes sure the new name never
// points at data still in memory; the second makes the rename itself
// survive a power loss. A killed writer can leave its temporary file behind;
// List and Load never look at it, and the next WriteAtomic in that folder
// (or the next List of it) removes it once it is a minute old (sweepTemps).
//
// The file is created with mode 0o600, because a history holds tool output,
// which may include secrets from the user's files.
func WriteAtomic(path string, data []byte) (err error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	sweepTemps(dir)
	tmp, err := tempfile.Create(dir, "."+name+tempSep+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer tempfile.Done(tmp.Name())
	defer func() {
		if err != nil {
			// The temporary file is useless once the rename is off; a
			// failure to remove it only leaves a file List ignores.
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		// The new file is in place and complete; only its durability
		// across a power loss is in doubt, which the caller should hear.
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}

// tempSep separates the target's name from the random part in the name of
// WriteAtomic's temporary file: ".<id>.json.tmp-<random>".
const tempSep = ".tmp-"

// isSessionTemp reports whether name is WriteAtomic's temporary file for a
// session file: ".<id>.json.tmp-<random>" with an id that CheckID accepts.
func isSessionTemp(name string) bool {
	target, ok := tempfile.Match(name, tempSep)
	if !ok {
		return false
	}
	id, ok := strings.CutSuffix(target, ".json")
	return ok && CheckID(id) == nil
}

// sweepTemps removes from a sessions folder the temporary files of writes
// a killed mm never finished (internal/tempfile: a minute old at least,
// not in flight here, once a minute per folder at most). Each can be as
// large as a session, and nothing else would ever remove them.
func sweepTemps(dir string) { tempfile.Sweep(dir, "session", isSessionTemp) }
