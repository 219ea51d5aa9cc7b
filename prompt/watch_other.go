//go:build !linux

package prompt

import "errors"

// Watch is inotify's, on Linux; elsewhere there is none, and every turn
// looks for its instructions again.
type Watch struct{}

// NewWatch fails off Linux.
func NewWatch() (*Watch, error) { return nil, errors.New("no inotify on this system") }

// Close does nothing.
func (w *Watch) Close() {}

// Look fails off Linux: the folders are looked at every turn.
func (w *Watch) Look(string, []string) bool { return false }

// Ticket is 0 off Linux.
func (w *Watch) Ticket() uint64 { return 0 }

// SameSince is false off Linux.
func (w *Watch) SameSince(string, uint64) bool { return false }

// Drop does nothing.
func (w *Watch) Drop(string) {}

// Watched is 0 off Linux.
func (w *Watch) Watched() int { return 0 }
