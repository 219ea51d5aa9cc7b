//go:build windows

package store

// syncDir does nothing on Windows, where a directory cannot be opened for
// syncing and MoveFileEx (behind os.Rename) already replaces the entry
// in one step.
func syncDir(string) error { return nil }
