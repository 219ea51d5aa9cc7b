package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	fsExecute    = 1 << 0
	fsWriteFile  = 1 << 1
	fsReadFile   = 1 << 2
	fsReadDir    = 1 << 3
	fsRefer      = 1 << 13 // ABI 2
	fsTruncate   = 1 << 14 // ABI 3
	fsIoctlDev   = 1 << 15 // ABI 5
	fsRead       = fsExecute | fsReadFile | fsReadDir
	fsV1         = 1<<13 - 1 // execute … make_sym
	fsFile       = fsExecute | fsWriteFile | fsReadFile | fsTruncate | fsIoctlDev
	netBindTCP   = 1 << 0
	netConnTCP   = 1 << 1
	netTCP       = netBindTCP | netConnTCP
	createVer    = 1 << 0 // LANDLOCK_CREATE_RULESET_VERSION
	rulePathBelo = 1      // LANDLOCK_RULE_PATH_BENEATH
)

type rulesetAttr struct{ fs, net uint64 }

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

// restrict applies p to the calling thread with Landlock: everything
// readable but the hidden paths (readAllBut), writable only what the mode
// lets (the session's folders, its temporary folder, the null devices;
// everything not hidden in Full), and with the network off (ABI 4 and
// later), no TCP connection nor bind. The thread can gain no privilege
// after it (no_new_privs), as Landlock requires.
func restrict(p Policy) error {
	abi := landlockABI()
	if abi < 1 {
		return errors.New("the kernel has no Landlock")
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
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
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
	if err := readAllBut("/", hiddenFrom(p), base, allow); err != nil {
		return err
	}
	// A readable folder inside a hidden one is granted on its own.
	for _, r := range resolved(p.Readable) {
		if err := allow(r, fsRead, true); err != nil {
			return err
		}
	}
	for _, w := range write {
		if err := allow(w, all, true); err != nil {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	if p.Temp != "" && p.Mode != Full {
		// /tmp is everyone's: the command's temporary folder is the
		// session's own.
		for _, k := range []string{"TMPDIR", "TMP", "TEMP"} {
			os.Setenv(k, p.Temp)
		}
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
