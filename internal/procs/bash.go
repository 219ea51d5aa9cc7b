package procs

import (
	"errors"
	"os/exec"
)

// ErrNoBash says that no bash is on PATH, in words for the model and the
// user.
var ErrNoBash = errors.New("bash was not found on PATH: mm runs commands with bash (on Windows, install Git for Windows and put its bin folder on PATH)")

// Bash returns the command that runs script with bash -c. Its bash is the
// first on PATH, on every system (on Windows, Git for Windows' bash is the
// one that runs the scripts models write); when there is none, starting
// the command fails with ErrNoBash.
func Bash(script string) *exec.Cmd {
	cmd := exec.Command("bash", "-c", script)
	if errors.Is(cmd.Err, exec.ErrNotFound) {
		cmd.Err = ErrNoBash
	}
	return cmd
}
