//go:build windows

package store

import "os"

// openNoFollow opens path for reading unless it is a symbolic link or
// another reparse point (errLink). Windows has no O_NOFOLLOW: the entry is
// looked at first, then the opened file must be that same entry, so that
// a link swapped in between is caught too.
func openNoFollow(path string) (*os.File, error) {
	before, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if before.Mode()&(os.ModeSymlink|os.ModeIrregular) != 0 {
		return nil, errLink
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if after, err := f.Stat(); err != nil || !os.SameFile(before, after) {
		f.Close()
		return nil, errLink
	}
	return f, nil
}
