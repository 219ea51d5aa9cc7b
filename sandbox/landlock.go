package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// helperArg, as a program's first argument, makes Main apply a Landlock
// policy and exec the command after it (Wrap with Landlock): Landlock
// restricts the process that asks, and what it execs, so the restriction is
// made in a process of its own, between mm and the command.
const helperArg = "__mm-sandbox"

// Main is the Landlock helper when this process was started as one: it
// restricts itself as the policy in its arguments says and execs the
// command; it returns at once otherwise. mm's main and the test binaries
// that confine with Landlock call it first.
func Main() {
	if len(os.Args) < 4 || os.Args[1] != helperArg || os.Args[3] != "--" || len(os.Args) < 5 {
		return
	}
	// Landlock restricts the thread that asks; the exec below, from that
	// same thread, hands the restriction to the command.
	runtime.LockOSThread()
	var p Policy
	if err := json.Unmarshal([]byte(os.Args[2]), &p); err != nil {
		fmt.Fprintf(os.Stderr, "mm sandbox: %v\n", err)
		os.Exit(126)
	}
	if err := restrict(p); err != nil {
		fmt.Fprintf(os.Stderr, "mm sandbox: cannot confine the command with Landlock: %v\n", err)
		os.Exit(126)
	}
	path, err := exec.LookPath(os.Args[4])
	if err != nil {
		fmt.Fprintf(os.Stderr, "mm sandbox: %v\n", err)
		os.Exit(127)
	}
	err = syscall.Exec(path, os.Args[4:], os.Environ())
	fmt.Fprintf(os.Stderr, "mm sandbox: %v\n", err)
	os.Exit(126)
}

// wrapLandlock makes cmd run through this program as Landlock's helper.
func (s *Sandbox) wrapLandlock(cmd *exec.Cmd, p Policy) error {
	if p.Temp != "" {
		if err := os.Mkdir(p.Temp, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("the session's temporary folder: %w", err)
		}
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	args := append([]string{s.self, helperArg, string(data), "--", cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = s.self, args
	return nil
}
