//go:build !linux

package procs

import "log/slog"

// KillSession needs /proc to find a session's processes, so on macOS and
// Windows it does nothing and returns 0. There, what a command leaves in
// the background outlives the session on macOS, and dies when the
// command's Group is closed on Windows.
func KillSession(string) int { return 0 }

// KillDescendants needs /proc; on macOS and Windows it does nothing and
// returns 0. On Windows, the jobs of the groups still open die with mm.
func KillDescendants() int { return 0 }

// BecomeSubreaper is Linux only; elsewhere it does nothing, and orphans go
// to init (launchd) or, on Windows, keep no parent.
func BecomeSubreaper(*slog.Logger) (func(), error) { return func() {}, nil }
