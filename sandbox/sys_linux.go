package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// landlockABI is the Landlock ABI the kernel offers, 0 when none.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, createVer)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// Landlock's uAPI (linux/landlock.h): the rights, by ABI, and the
// attributes of a ruleset and of a rule.
const (
	fsExecute   = 1 << 0
	fsWriteFile = 1 << 1
	fsReadFile  = 1 << 2
	fsReadDir   = 1 << 3
	fsRefer     = 1 << 13 // ABI 2
	fsTruncate  = 1 << 14 // ABI 3
	fsIoctlDev  = 1 << 15 // ABI 5
	fsRead      = fsExecute | fsReadFile | fsReadDir
	fsV1        = 1<<13 - 1 // execute … make_sym
	fsFile      = fsExecute | fsWriteFile | fsReadFile | fsTruncate | fsIoctlDev
	netBindTCP  = 1 << 0
	netConnTCP  = 1 << 1
	netTCP      = netBindTCP | netConnTCP
	// LANDLOCK_SCOPE_* (ABI 6)
	scopeAbstractUnix = 1 << 0
	scopeSignal       = 1 << 1
	createVer         = 1 << 0 // LANDLOCK_CREATE_RULESET_VERSION
	rulePathBelo      = 1      // LANDLOCK_RULE_PATH_BENEATH
)

type rulesetAttr struct{ fs, net, scoped uint64 }

// pathBeneath is struct landlock_path_beneath_attr, which is packed: the
// kernel reads its first 12 bytes.
type pathBeneath struct {
	allowed uint64
	fd      int32
}

// fsRights are the file system rights the kernel's ABI knows.
func fsRights(abi int) uint64 {
	r := uint64(fsV1)
	if abi >= 2 {
		r |= fsRefer
	}
	if abi >= 3 {
		r |= fsTruncate
	}
	if abi >= 5 {
		r |= fsIoctlDev
	}
	return r
}

// ruleset is p as a Landlock ruleset: everything readable but the hidden
// paths (readAllBut), writable only what the mode lets (the session's
// folders, its temporary folder, the null devices; everything not hidden
// in Full), with the network off (ABI 4 and later) no TCP connection nor
// bind, and (ABI 6 and later) no signal to a process outside the domain
// and no abstract unix socket outside it. It is made by whoever may open
// the paths (root, before the command's user takes over) and enforced by
// enforce.
func ruleset(p Policy) (int, error) {
	abi := landlockABI()
	if abi < 1 {
		return -1, errors.New("the kernel has no Landlock")
	}
	all := fsRights(abi)
	attr := rulesetAttr{fs: all}
	if !p.Network && abi >= 4 {
		attr.net = netTCP
	}
	size := uintptr(8) // the network's rights came with ABI 4
	if abi >= 4 {
		size = 16
	}
	if abi >= 6 {
		attr.scoped = scopeAbstractUnix | scopeSignal
		size = 24
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return -1, fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	allow := func(path string, rights uint64, follow bool) error {
		flags := unix.O_PATH | unix.O_CLOEXEC
		if !follow {
			flags |= unix.O_NOFOLLOW
		}
		pfd, err := unix.Open(path, flags, 0)
		if err != nil {
			return nil // a path that is not there grants nothing
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil // a link grants nothing: its target has its own rule
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			rights &= fsFile
		}
		rule := pathBeneath{allowed: rights & all, fd: int32(pfd)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, rulePathBelo, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock_add_rule %s: %w", path, errno)
		}
		return nil
	}
	write := []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty"}
	switch p.Mode {
	case WorkspaceWrite:
		write = append(write, resolved(p.Writable)...)
	}
	if p.Temp != "" && p.Mode != Full {
		write = append(write, p.Temp)
	}
	base := uint64(fsRead)
	if p.Mode == Full {
		base = all // everything, but for the hidden paths
	}
	err := readAllBut("/", hiddenFrom(p), base, allow)
	// A readable folder inside a hidden one is granted on its own.
	for _, r := range resolved(p.Readable) {
		if err == nil {
			err = allow(r, fsRead, true)
		}
	}
	for _, w := range write {
		if err == nil {
			err = allow(w, all, true)
		}
	}
	if err != nil {
		unix.Close(int(fd))
		return -1, err
	}
	return int(fd), nil
}

// enforce restricts the calling thread (and what it execs) with the
// ruleset fd: no_new_privs first, as Landlock requires of a thread that
// has no CAP_SYS_ADMIN.
func enforce(fd int) error {
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// landlockExec is the Landlock helper: on a thread of its own, it joins
// or makes the command's network namespace, builds the ruleset while it
// may still open every path, becomes the command's user, enforces the
// ruleset and the seccomp filter, and execs the command, which keeps them
// all. Each of these applies to the thread that makes it, and execve keeps
// that thread's.
func landlockExec(spec helperSpec, argv []string) error {
	runtime.LockOSThread()
	p := spec.Policy
	switch spec.Netns {
	case "":
	case "new":
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("a network namespace of its own: %w", err)
		}
		// A new namespace's loopback is down: bring it up, as
		// bubblewrap does, so that the command's own servers work.
		if err := loopbackUp(); err != nil {
			return err
		}
	default:
		fd, err := unix.Open(spec.Netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("the session's network: %w", err)
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("the session's network: %w", err)
		}
	}
	rules, err := ruleset(p)
	if err != nil {
		return fmt.Errorf("cannot confine the command with Landlock: %w", err)
	}
	if p.User != nil {
		if err := becomeUser(*p.User); err != nil {
			return err
		}
	}
	if err := enforce(rules); err != nil {
		return fmt.Errorf("cannot confine the command with Landlock: %w", err)
	}
	prog, err := seccompProgram(spec.Filter)
	if err == nil {
		err = installSeccomp(prog)
	}
	if err != nil {
		return err
	}
	if p.Temp != "" && p.Mode != Full {
		// /tmp is everyone's: the command's temporary folder is the
		// session's own.
		for _, k := range []string{"TMPDIR", "TMP", "TEMP"} {
			os.Setenv(k, p.Temp)
		}
	}
	return execve(argv)
}

// dropExec runs argv as u, with no capability and no way to gain one.
func dropExec(u Ident, argv []string) error {
	runtime.LockOSThread()
	if err := becomeUser(u); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return execve(argv)
}

// becomeUser makes the calling thread u's, and only it: the capability
// bounding set emptied first (which takes CAP_SETPCAP), then no
// supplementary group, u's group and u's id, which clears the thread's
// capabilities. The raw system calls change this thread alone, which is
// the one that execs; Go's own would try every thread, which a program
// built with cgo (the race detector) cannot.
func becomeUser(u Ident) error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
		return fmt.Errorf("setgroups: %w", errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(u.GID), uintptr(u.GID), uintptr(u.GID)); errno != 0 {
		return fmt.Errorf("setresgid %d: %w", u.GID, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(u.UID), uintptr(u.UID), uintptr(u.UID)); errno != 0 {
		return fmt.Errorf("setresuid %d: %w", u.UID, errno)
	}
	return nil
}

// execve runs argv[0] (looked up on PATH) in place of this program.
func execve(argv []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, os.Environ())
}

// loopbackUp brings the network namespace's lo up (SIOCSIFFLAGS).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	return nil
}

// hiddenFrom are the paths p hides that Landlock can hide, link-free: not
// one inside a writable folder (the folder's rule grants it), nor one that
// holds a writable folder (hiding it would hide that folder too).
func hiddenFrom(p Policy) []string {
	var writable []string
	if p.Mode == WorkspaceWrite {
		writable = resolved(p.Writable)
	}
	var out []string
	for _, h := range resolved(p.Hidden) {
		if !slices.ContainsFunc(writable, func(w string) bool { return within(h, w) || within(w, h) }) {
			out = append(out, h)
		}
	}
	return out
}

// readAllBut grants rights (reading, or all of them in Full) to everything
// beneath dir but the hidden paths:
// a folder that holds none is granted whole; one that holds some is not
// granted itself (Landlock's rules reach everything beneath them), but
// each of its entries is, that way, one by one. So a command cannot list
// a folder that holds a hidden path, but reads the rest of it.
func readAllBut(dir string, hidden []string, rights uint64, allow func(string, uint64, bool) error) error {
	holds := false
	for _, h := range hidden {
		if h == dir {
			return nil
		}
		holds = holds || within(dir, h)
	}
	if !holds {
		return allow(dir, rights, false)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // an unreadable folder grants nothing
	}
	for _, e := range entries {
		if err := readAllBut(filepath.Join(dir, e.Name()), hidden, rights, allow); err != nil {
			return err
		}
	}
	return nil
}
