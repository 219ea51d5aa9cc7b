//go:build windows

package store

import "testing"

// plantSpecial adds nothing on Windows, which has no FIFOs in folders.
func plantSpecial(t *testing.T, root string, refused map[string]string) map[string]string {
	return refused
}
