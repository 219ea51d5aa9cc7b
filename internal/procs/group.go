package procs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"
)

// KillGroup kills a command's whole process group with SIGKILL. The shell's
// pid is the group id, and it cannot name an unrelated group here: either
// the shell is not reaped yet, or (if it exited at that very moment) the id
// stays reserved while any member of the group lives, and an empty group's
// id is reused only after the pid space wraps around. The kernel makes a
// fork that races with a group signal fail and retry, so no new member
// slips through.
func KillGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// WaitGroupGone polls until no living process is left in the group, or
// the deadline passes.
func WaitGroupGone(pgid int, deadline time.Time) {
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

// A command's output goes to a pipe its runner owns, rather than to an
// io.Writer that os/exec would copy from: exec's Wait would then wait for
// every holder of the pipe, including grandchildren left in the background,
// and never return. CopyPipe reads it while the command runs, FinishPipe
// once it is reaped.

// CopyPipe copies the pipe into w until a read fails: its end, or its
// deadline.
func CopyPipe(pr *os.File, w io.Writer) {
	buf := make([]byte, 32<<10)
	for {
		n, err := pr.Read(buf)
		_, _ = w.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// FinishPipe reads what is left in the pipe once the command is reaped, and
// closes it; readDone is closed when the CopyPipe goroutine has returned.
// What the command wrote is in the pipe by then. The reader goroutine is
// stopped (a past deadline wakes its Read at once) and the rest is read
// without waiting: waiting for the poller to report the pipe's end took a
// scheduler tick or more on a busy machine, every command. Only when the
// pipe is still held open — by processes left in the background on
// purpose, by killed members on their way out, or by processes that left
// the group — is its end waited for, until deadline.
func FinishPipe(pr *os.File, w io.Writer, readDone <-chan struct{}, deadline time.Time) {
	_ = pr.SetReadDeadline(time.Now())
	<-readDone
	_ = pr.SetReadDeadline(time.Time{})
	if !drainNow(pr, w) {
		_ = pr.SetReadDeadline(deadline)
		CopyPipe(pr, w)
	}
	pr.Close()
}

// drainNow reads what the pipe holds without waiting for more. It reports
// whether it reached the pipe's end (every writer gone).
func drainNow(pr *os.File, w io.Writer) (eof bool) {
	rc, err := pr.SyscallConn()
	if err != nil {
		return false
	}
	buf := make([]byte, 32<<10)
	_ = rc.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.Read(int(fd), buf)
			switch {
			case n > 0:
				_, _ = w.Write(buf[:n])
			case n == 0 && err == nil:
				eof = true
				return true
			case err == syscall.EINTR:
			default:
				return true // EAGAIN: writers remain; never wait here
			}
		}
	})
	return eof
}
