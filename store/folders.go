package store

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Folders is the index of the project folders that hold saved sessions. It
// lives in the user's state directory, so that session/list without a cwd
// finds the sessions of every folder, in a process that has not seen them
// yet. Each folder is one small file named by a hash of its path and
// holding the path: adding one is creating a file, so processes that add
// at the same time never lose each other's folders, and no lock is needed.
// A nil *Folders keeps no index. Its methods are safe for concurrent use.
type Folders struct {
	dir   string
	mu    sync.Mutex
	added map[string]bool // the folders this process has added
}

// StateDir is the user's state directory for mm: $XDG_STATE_HOME/mm, or
// ~/.local/state/mm; "" when neither can be found.
func StateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "mm")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".local", "state", "mm")
}

// OpenFolders uses the index kept in stateDir/folders; "" keeps none.
func OpenFolders(stateDir string) *Folders {
	if stateDir == "" {
		return nil
	}
	return &Folders{dir: filepath.Join(stateDir, "folders"), added: map[string]bool{}}
}

func (f *Folders) entry(cwd string) string {
	sum := sha256.Sum256([]byte(cwd))
	return filepath.Join(f.dir, hex.EncodeToString(sum[:12]))
}

// Add records cwd, a folder that now holds a saved session. It is best
// effort: an index that cannot be written only makes session/list without
// a cwd miss the folder, and it reports the error for the log.
func (f *Folders) Add(cwd string) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	done := f.added[cwd]
	f.mu.Unlock()
	if done {
		return nil
	}
	path := f.entry(cwd)
	if b, err := os.ReadFile(path); err != nil || string(b) != cwd {
		if err := os.MkdirAll(f.dir, 0o700); err != nil {
			return err
		}
		if err := WriteAtomic(path, []byte(cwd)); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.added[cwd] = true
	f.mu.Unlock()
	return nil
}

// List returns the indexed folders that still hold a sessions folder named
// dir, sorted; the others (a project moved or deleted, its sessions
// removed) are dropped from the index.
func (f *Folders) List(dir string) []string {
	if f == nil {
		return nil
	}
	names, err := os.ReadDir(f.dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		path := filepath.Join(f.dir, n.Name())
		if strings.HasPrefix(n.Name(), ".") || n.IsDir() {
			continue // WriteAtomic's temporary files
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		cwd := string(b)
		if !filepath.IsAbs(cwd) || f.entry(cwd) != path {
			_ = os.Remove(path) // not an entry of ours
			continue
		}
		if fi, err := os.Stat(filepath.Join(cwd, dir)); err != nil || !fi.IsDir() {
			_ = os.Remove(path)
			f.mu.Lock()
			delete(f.added, cwd)
			f.mu.Unlock()
			continue
		}
		out = append(out, cwd)
	}
	sort.Strings(out)
	return out
}
