//go:build !linux

package procs

import "log/slog"

// KillSession needs /proc to find a session's processes; elsewhere only
// their process groups are killed (by the bash tool), and it returns 0.
func KillSession(string) int { return 0 }

// KillDescendants needs /proc; elsewhere it returns 0.
func KillDescendants() int { return 0 }

// BecomeSubreaper is Linux only; elsewhere orphans go to init.
func BecomeSubreaper(*slog.Logger) (func(), error) { return func() {}, nil }
