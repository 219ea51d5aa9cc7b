package tools

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"
)

// killGroup kills the command's whole process group with SIGKILL. Bash's
// pid is the group id, and it cannot name an unrelated group here: either
// bash is not reaped yet, or (if it exited at that very moment) the id
// stays reserved while any member of the group lives, and an empty group's
// id is reused only after the pid space wraps around. The kernel makes a
// fork that races with a group signal fail and retry, so no new member
// slips through.
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// waitGroupGone polls until no living process is left in the group, or
// the deadline passes.
func waitGroupGone(pgid int, deadline time.Time) {
	for pause := 100 * time.Microsecond; groupHasLiving(pgid); pause = min(2*pause, 10*time.Millisecond) {
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(pause)
	}
}

// groupHasLiving says whether a process group still has a member that is
// not a zombie. Signal 0 answers for free when the group is empty, but it
// counts zombies, and the killed orphans stay zombies until init reaps
// them, which some inits (a container's, a VM's) do only now and then. The
// zombies are dead, so when signal 0 says the group exists, /proc is asked
// whether any member is still alive. Without /proc, the group counts as
// alive, and the caller's deadline bounds the wait.
func groupHasLiving(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	d, err := os.Open("/proc")
	if err != nil {
		return true
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return true
	}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		if state, group, ok := parseStat(b); ok && group == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// parseStat reads the state and the process group from the text of
// /proc/<pid>/stat. The command name, in parentheses, may hold spaces and
// parentheses, so the fields are counted from the last ")".
func parseStat(b []byte) (state byte, pgid int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) == 0 {
		return 0, 0, false
	}
	pgid, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pgid, true
}
