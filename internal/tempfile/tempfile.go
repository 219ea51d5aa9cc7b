// Package tempfile creates the temporary files of mm's atomic writes and
// removes the ones a killed mm left behind.
//
// An atomic write puts the new content in a temporary file beside its
// target and renames it over the target. A process killed in between (kill
// -9, a power cut) leaves the temporary file there, in the user's project
// where `git status` shows it. Sweep removes such leftovers when mm next
// uses the folder: only names of mm's own making (Match), only regular
// files, only those last written long enough ago (MinAge) that no write can
// still be filling them, and never one that a write of this process has in
// flight.
//
// Concurrency: every function is safe for concurrent use. The package keeps
// two process-wide records, both bounded: the temporary files being written
// now (one per write in flight), and when each folder was last swept (at
// most maxSwept folders; past that, the oldest are forgotten, which only
// means that a folder may be swept again sooner).
package tempfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// MinAge is how long ago a leftover must have been last written to be
// removed. A write in flight writes its file within milliseconds of
// creating it; a minute leaves room for a slow disk and for the clocks of
// a network file system.
const MinAge = time.Minute

// SweepEvery is how often one folder is swept at most: a folder written to
// after every turn is read once a minute, not each time.
const SweepEvery = time.Minute

// maxEntries bounds the entries one sweep reads, so that a write into a
// folder of millions of files costs a bounded time; leftovers past it are
// found by a later sweep only if the folder shrinks.
const maxEntries = 1 << 16

// maxSwept bounds the record of swept folders.
const maxSwept = 1024

var (
	mu       sync.Mutex
	inFlight = map[string]int{}       // temporary files being written, by path
	swept    = map[string]time.Time{} // folder+kind → when it was last swept
)

// Create is os.CreateTemp(dir, pattern) for an atomic write: the file is
// recorded as in flight, so that no Sweep of this process removes it, until
// Done is called with its name.
func Create(dir, pattern string) (*os.File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	inFlight[filepath.Clean(f.Name())]++
	mu.Unlock()
	return f, nil
}

// Done ends the record Create made of name, once the file is renamed or
// removed.
func Done(name string) {
	name = filepath.Clean(name)
	mu.Lock()
	if inFlight[name] <= 1 {
		delete(inFlight, name)
	} else {
		inFlight[name]--
	}
	mu.Unlock()
}

// Match reports whether name is what os.CreateTemp(dir, "."+target+sep+"*")
// makes for some non-empty target, and returns that target: a dot, the
// target, sep, then CreateTemp's random part (1 to 10 decimal digits).
func Match(name, sep string) (target string, ok bool) {
	i := strings.LastIndex(name, sep)
	if i < 2 || name[0] != '.' {
		return "", false
	}
	random := name[i+len(sep):]
	if len(random) < 1 || len(random) > 10 || strings.Trim(random, "0123456789") != "" {
		return "", false
	}
	return name[1:i], true
}

// Sweep removes from dir the stale temporary files that ours recognises
// (see the package doc), and returns how many it removed. kind names the
// naming ours checks: the same folder may be swept for two kinds. A folder
// is swept for a kind at most once every SweepEvery; a sweep reads at most
// 65,536 entries. Failures are ignored: a leftover that cannot be removed
// stays, as it would have without the sweep.
func Sweep(dir, kind string, ours func(name string) bool) int {
	key := filepath.Clean(dir) + "\x00" + kind
	now := time.Now()
	mu.Lock()
	if last, ok := swept[key]; ok && now.Sub(last) < SweepEvery {
		mu.Unlock()
		return 0
	}
	if len(swept) >= maxSwept {
		for k, t := range swept {
			if now.Sub(t) >= SweepEvery {
				delete(swept, k)
			}
		}
		if len(swept) >= maxSwept {
			clear(swept)
		}
	}
	swept[key] = now
	mu.Unlock()

	d, err := os.Open(dir)
	if err != nil {
		return 0
	}
	defer d.Close()
	removed, seen := 0, 0
	for seen < maxEntries {
		entries, err := d.ReadDir(256)
		seen += len(entries)
		for _, e := range entries {
			if !e.Type().IsRegular() || !ours(e.Name()) {
				continue
			}
			if removeStale(filepath.Join(dir, e.Name()), now) {
				removed++
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return removed
			}
			break
		}
	}
	return removed
}

// removeStale removes path if it is a regular file last written MinAge
// before now and no write of this process has it in flight.
func removeStale(path string, now time.Time) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || now.Sub(fi.ModTime()) < MinAge {
		return false
	}
	mu.Lock()
	busy := inFlight[filepath.Clean(path)] > 0
	mu.Unlock()
	return !busy && os.Remove(path) == nil
}
