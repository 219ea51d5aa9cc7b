package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
)

// helperArg, as a program's first argument, makes Main apply a Landlock
// policy and exec the command after it (Wrap with Landlock): Landlock
// restricts the process that asks, and what it execs, so the restriction is
// made in a process of its own, between mm and the command.
const helperArg = "__mm-sandbox"

// dropArg, as a program's first argument, makes Main run the command after
// it as another user with no capability (inside bubblewrap, where setpriv
// is not installed).
const dropArg = "__mm-drop"

// helperSpec is what the Landlock helper is told, as its second argument.
type helperSpec struct {
	Policy Policy `json:"policy"`
	// Netns is the network namespace to join (a session's own network,
	// when mm runs as root), "" for the one the helper is in.
	Netns string `json:"netns,omitempty"`
	// Filter is the seccomp filter's switches.
	Filter filter `json:"filter"`
}

// Main is the Landlock helper when this process was started as one: it
// restricts itself as the policy in its arguments says and execs the
// command; or the dropper, which execs the command as another user. It
// returns at once otherwise. mm's main and the test binaries that confine
// with Landlock call it first.
func Main() {
	if len(os.Args) < 5 || os.Args[3] != "--" {
		return
	}
	switch os.Args[1] {
	case helperArg:
		var spec helperSpec
		if err := json.Unmarshal([]byte(os.Args[2]), &spec); err != nil {
			helperFail(126, err)
		}
		helperFail(126, landlockExec(spec, os.Args[4:]))
	case dropArg:
		u, err := parseIDs(os.Args[2])
		if err != nil {
			helperFail(126, err)
		}
		helperFail(126, dropExec(u, os.Args[4:]))
	}
}

func helperFail(code int, err error) {
	fmt.Fprintf(os.Stderr, "mm sandbox: %v\n", err)
	os.Exit(code)
}

// parseIDs reads "uid:gid".
func parseIDs(s string) (Ident, error) {
	var u, g uint64
	if n, err := fmt.Sscanf(s, "%d:%d", &u, &g); n != 2 || err != nil || u > 1<<32-1 || g > 1<<32-1 {
		return Ident{}, fmt.Errorf("not uid:gid: %q", s)
	}
	return Ident{UID: uint32(u), GID: uint32(g)}, nil
}

// wrapLandlock makes cmd run through this program as Landlock's helper:
// in the session's own network namespace when netPid names one (joined
// by the helper when mm runs as root, by nsenter before it otherwise), as
// p.User when set.
func (s *Sandbox) wrapLandlock(cmd *exec.Cmd, p Policy, netPid int) error {
	if p.Temp != "" {
		if err := os.Mkdir(p.Temp, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("the session's temporary folder: %w", err)
		}
		if p.User != nil {
			if err := os.Chown(p.Temp, int(p.User.UID), int(p.User.GID)); err != nil {
				return fmt.Errorf("the session's temporary folder: %w", err)
			}
		}
	}
	spec := helperSpec{Policy: p, Filter: filter{NoUnix: !p.Network}}
	var args []string
	if netPid > 0 {
		ns := "/proc/" + strconv.Itoa(netPid) + "/ns/"
		if os.Geteuid() == 0 {
			spec.Netns = ns + "net"
		} else {
			// A Go program cannot join a user namespace (it has threads):
			// nsenter joins it and the network first.
			args = append(args, nsenterPath(), "--user="+ns+"user", "--net="+ns+"net", "--preserve-credentials", "--")
		}
	} else if !p.Network && os.Geteuid() != 0 {
		// No network namespace of its own: Landlock keeps TCP off (ABI 4),
		// the filter every other socket that reaches out.
		spec.Filter.NoInet = true
	}
	if !p.Network && os.Geteuid() == 0 {
		spec.Netns = "new" // the helper makes one of its own, loopback only
	}
	home := os.TempDir()
	if p.Temp != "" {
		home = p.Temp
	}
	cmd.Env = environ(cmd.Env, envNames(p.Env), p.User, home)
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	args = append(args, s.self, helperArg, string(data), "--", cmd.Path)
	args = append(args, cmd.Args[1:]...)
	cmd.Path, cmd.Args = args[0], args
	return nil
}
