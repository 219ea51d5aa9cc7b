package skills

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// racyWindow is how close to the moment of reading an mtime must be for
// the cached entry to be distrusted. A change made within the same
// timestamp tick as the read leaves mtime (and perhaps size) as they were,
// so an entry this fresh is read again on the next Load. Two seconds covers
// the coarsest common timestamps (FAT) and small clock skew on network
// filesystems; the cost is only re-reading files edited moments ago.
const racyWindow = 2 * time.Second

// maxCached bounds each cache map. Keys are directories and lists of
// directories of sessions, so a long-lived process that served sessions in
// many projects would otherwise keep them all; dropping the whole map now
// and then costs one re-read per directory, which is cheap.
const maxCached = 1024

// parses counts SKILL.md reads-and-parses done by Load, so that tests can
// check that an unchanged catalog is not read again.
var parses atomic.Int64

// cache is the process-wide cache. Its mutex guards only the two maps;
// each entry has its own mutex, so that sessions in different projects do
// not wait on each other's stat calls.
var cache struct {
	mu   sync.Mutex
	dirs map[string]*dirEntry // by directory
	sets map[string]*setEntry // by the directories' list, joined with NUL
}

// dirEntry caches one skill directory.
type dirEntry struct {
	mu   sync.Mutex
	snap *dirSnap
}

// setEntry caches the Set composed from a list of directories, with the
// directory snapshots it was composed from.
type setEntry struct {
	mu    sync.Mutex
	snaps []*dirSnap
	set   *Set
}

// dirSnap is what one directory held when it was last validated. It is
// immutable: a change produces a new snapshot, so that a pointer comparison
// tells whether anything changed.
type dirSnap struct {
	exists  bool
	mtime   time.Time
	racy    bool   // mtime was too fresh to trust; list the directory again
	warning string // why the directory could not be read, if it could not
	subs    []*subSnap
}

// subSnap is what one skill folder held when it was last validated.
// Folders without a SKILL.md are kept too, because writing a SKILL.md into
// an existing folder does not change the skill directory's mtime: only its
// own stat reveals it.
type subSnap struct {
	folder   string // absolute
	path     string // folder/SKILL.md
	present  bool   // SKILL.md exists (it may still be broken)
	mtime    time.Time
	size     int64
	racy     bool   // mtime was too fresh to trust; read the file again
	statErr  string // a stat failure other than "does not exist"
	skill    *Skill // nil when absent or broken
	warnings []string
}

// Load returns the catalog of dirs (absolute), from the cache when nothing changed on disk.
// A directory listed twice counts once, at its last place, because the
// later place is the one that wins. When nothing changed since the last Load
// of the same list, the same *Set is returned.
func Load(dirs []string) *Set {
	dirs = dedupe(dirs)
	snaps := make([]*dirSnap, len(dirs))
	for i, d := range dirs {
		snaps[i] = entryFor(d).refresh(d)
	}
	e := setFor(strings.Join(dirs, "\x00"))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.set != nil && slices.Equal(e.snaps, snaps) {
		return e.set
	}
	set := compose(snaps)
	// A racy entry re-read without change yields new snapshots but the same
	// catalog; keep handing out the old pointer so callers see no change.
	if e.set != nil && e.set.equal(set) {
		set = e.set
	}
	e.snaps, e.set = snaps, set
	return set
}

// dedupe cleans dirs and keeps the last occurrence of each.
func dedupe(dirs []string) []string {
	out := make([]string, 0, len(dirs))
	seen := make(map[string]bool, len(dirs))
	for i := len(dirs) - 1; i >= 0; i-- {
		if dirs[i] == "" {
			continue
		}
		d := filepath.Clean(dirs[i])
		if seen[d] {
			continue
		}
		seen[d] = true
		out = append(out, d)
	}
	slices.Reverse(out)
	return out
}

// entryFor returns the cache entry of a directory, creating it if needed.
func entryFor(dir string) *dirEntry {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if e, ok := cache.dirs[dir]; ok {
		return e
	}
	if cache.dirs == nil || len(cache.dirs) >= maxCached {
		cache.dirs = make(map[string]*dirEntry)
	}
	e := &dirEntry{}
	cache.dirs[dir] = e
	return e
}

// setFor returns the cache entry of a list of directories, creating it if
// needed.
func setFor(key string) *setEntry {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if e, ok := cache.sets[key]; ok {
		return e
	}
	if cache.sets == nil || len(cache.sets) >= maxCached {
		cache.sets = make(map[string]*setEntry)
	}
	e := &setEntry{}
	cache.sets[key] = e
	return e
}

// isRacy says whether mtime is too close to now to be trusted.
func isRacy(mtime, now time.Time) bool {
	return !mtime.Before(now.Add(-racyWindow))
}

// refresh validates the entry's snapshot against the disk and returns it,
// the same pointer when nothing changed.
func (e *dirEntry) refresh(dir string) *dirSnap {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.snap = scanDir(dir, e.snap)
	return e.snap
}

// scanDir validates old (which may be nil) against dir and returns old
// itself when nothing changed, or a new snapshot.
func scanDir(dir string, old *dirSnap) *dirSnap {
	// The time is taken before any stat, so that a change racing with this
	// scan is always within the racy window of it.
	now := time.Now()
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		snap := &dirSnap{}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// A missing directory is simply empty: most projects have no
			// skills folder, and that is not worth a warning.
		case err != nil:
			snap.warning = fmt.Sprintf("skill directory %s cannot be read: %v", dir, unwrapPath(err))
		default:
			snap.warning = fmt.Sprintf("skill directory %s is not a directory", dir)
		}
		if old != nil && !old.exists && old.warning == snap.warning {
			return old
		}
		return snap
	}

	if old != nil && old.exists && !old.racy && fi.ModTime().Equal(old.mtime) {
		// No folder was added, removed or renamed: only the SKILL.md files
		// need checking.
		var subs []*subSnap
		for i, s := range old.subs {
			n := scanSub(s.folder, s, now)
			if n != s && subs == nil {
				subs = slices.Clone(old.subs)
			}
			if subs != nil {
				subs[i] = n
			}
		}
		if subs == nil {
			return old
		}
		return &dirSnap{exists: true, mtime: old.mtime, subs: subs}
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		return &dirSnap{exists: true, mtime: fi.ModTime(), racy: true,
			warning: fmt.Sprintf("skill directory %s cannot be listed: %v", dir, unwrapPath(err))}
	}
	prev := map[string]*subSnap{}
	if old != nil {
		for _, s := range old.subs {
			prev[s.folder] = s
		}
	}
	snap := &dirSnap{exists: true, mtime: fi.ModTime(), racy: isRacy(fi.ModTime(), now)}
	for _, ent := range entries {
		folder := filepath.Join(dir, ent.Name())
		if !ent.IsDir() {
			// A symbolic link to a folder is a skill too (people link skills
			// they share between projects); anything else is not.
			if ent.Type()&fs.ModeSymlink == 0 {
				continue
			}
			if t, err := os.Stat(folder); err != nil || !t.IsDir() {
				continue
			}
		}
		snap.subs = append(snap.subs, scanSub(folder, prev[folder], now))
	}
	return snap
}

// scanSub validates old (which may be nil) against folder's SKILL.md and
// returns old itself when nothing changed, or a new snapshot.
func scanSub(folder string, old *subSnap, now time.Time) *subSnap {
	path := filepath.Join(folder, skillFile)
	fi, err := os.Stat(path)
	if err != nil {
		s := &subSnap{folder: folder, path: path}
		if !errors.Is(err, fs.ErrNotExist) {
			s.statErr = err.Error()
			s.warnings = []string{fmt.Sprintf("skill file %s skipped: cannot read it: %v", path, unwrapPath(err))}
		}
		if old != nil && !old.present && old.statErr == s.statErr {
			return old
		}
		return s
	}
	if old != nil && old.present && !old.racy && fi.ModTime().Equal(old.mtime) && fi.Size() == old.size {
		return old
	}
	s := &subSnap{folder: folder, path: path, present: true, mtime: fi.ModTime(), size: fi.Size(),
		racy: isRacy(fi.ModTime(), now)}
	parses.Add(1)
	data, err := os.ReadFile(path)
	if err != nil {
		s.warnings = []string{fmt.Sprintf("skill file %s skipped: cannot read it: %v", path, unwrapPath(err))}
		return s
	}
	name, desc, err := parseSkill(data)
	if err != nil {
		s.warnings = []string{fmt.Sprintf("skill file %s skipped: %v", path, err)}
		return s
	}
	s.skill = &Skill{Name: name, Description: desc, Dir: folder, Path: path}
	if base := filepath.Base(folder); base != name {
		s.warnings = []string{fmt.Sprintf("skill %q in %s is in a folder named %q; it loads as /%s", name, path, base, name)}
	}
	return s
}

// unwrapPath drops the path from an *fs.PathError, because every warning
// already names the file.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// compose builds the catalog of the directories' snapshots, in order.
func compose(snaps []*dirSnap) *Set {
	set := &Set{}
	chosen := map[string]Skill{}
	for _, d := range snaps {
		if d.warning != "" {
			set.Warnings = append(set.Warnings, d.warning)
		}
		// Within one directory two folders may claim the same name. The
		// folder named like the skill wins, since that is where the author
		// will look for it; otherwise the first folder in sorted order does.
		local := map[string]Skill{}
		var order []string
		for _, s := range d.subs {
			set.Warnings = append(set.Warnings, s.warnings...)
			if s.skill == nil {
				continue
			}
			k := *s.skill
			if reserved(k.Name) {
				set.Warnings = append(set.Warnings, fmt.Sprintf("skill %q in %s is shadowed by the /%s command; rename it", k.Name, k.Path, k.Name))
				continue
			}
			prev, dup := local[k.Name]
			if !dup {
				local[k.Name] = k
				order = append(order, k.Name)
				continue
			}
			winner, loser := prev, k
			if filepath.Base(k.Dir) == k.Name && filepath.Base(prev.Dir) != prev.Name {
				winner, loser = k, prev
			}
			local[k.Name] = winner
			set.Warnings = append(set.Warnings, fmt.Sprintf("skill %q in %s is ignored: %s in the same directory has the same name", k.Name, loser.Path, winner.Path))
		}
		for _, name := range order {
			k := local[name]
			if prev, ok := chosen[name]; ok {
				set.Warnings = append(set.Warnings, fmt.Sprintf("skill %q in %s overrides the one in %s", name, k.Path, prev.Path))
			}
			chosen[name] = k
		}
	}
	for _, k := range chosen {
		set.Skills = append(set.Skills, k)
	}
	slices.SortFunc(set.Skills, func(a, b Skill) int { return strings.Compare(a.Name, b.Name) })
	return set
}
