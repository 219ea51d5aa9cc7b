//go:build !linux

package sandbox

import "errors"

// landlockABI is 0: Landlock is Linux's.
func landlockABI() int { return 0 }

func landlockExec(helperSpec, []string) error { return errors.New("Landlock is Linux's") }

func dropExec(Ident, []string) error {
	return errors.New("running a command as another user needs Linux here")
}
