//go:build !linux

package sandbox

import "errors"

// landlockABI is 0: Landlock is Linux's.
func landlockABI() int { return 0 }

func restrict(Policy) error { return errors.New("Landlock is Linux's") }
