//go:build unix

package procs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
)

// Group is a command's process group: the command and what it starts,
// unless a process leaves the group (setsid); a cancel kills them all with
// one signal. Linux and macOS alike.
type Group struct {
	cmd  *exec.Cmd
	pgid atomic.Int64 // the command's pid once started, 0 before
}

// NewGroup readies cmd, not started yet, to run in a process group of its
// own.
func NewGroup(cmd *exec.Cmd) *Group {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	return &Group{cmd: cmd}
}

// Started records the group of a command that was started elsewhere (an
// SDK's transport): Setpgid made its pid the group's id.
func (g *Group) Started() error {
	g.pgid.Store(int64(g.cmd.Process.Pid))
	return nil
}

// Kill kills the whole group with SIGKILL; before Started, it does
// nothing. The shell's pid is the group id, and it cannot name an
// unrelated group here: either the shell is not reaped yet, or (if it
// exited at that very moment) the id stays reserved while any member of
// the group lives, and an empty group's id is reused only after the pid
// space wraps around. The kernel makes a fork that races with a group
// signal fail and retry, so no new member slips through.
func (g *Group) Kill() {
	if pgid := int(g.pgid.Load()); pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// Close does nothing on Unix: what the command left in its group lives on,
// as a background job should; on Linux, KillSession and KillDescendants end
// it later.
func (g *Group) Close() {}

// hasLiving says whether the group still has a member that is not a
// zombie.
func (g *Group) hasLiving() bool {
	pgid := int(g.pgid.Load())
	return pgid > 0 && groupHasLiving(pgid)
}

// GroupID returns this process's group id, for tests that check what
// group a command got.
func GroupID() int { return syscall.Getpgrp() }

// groupHasLiving says whether a process group still has a member that is
// not a zombie. Signal 0 answers for free when the group is empty, but it
// counts zombies, and the killed orphans stay zombies until init reaps
// them, which some inits (a container's, a VM's) do only now and then. The
// zombies are dead, so when signal 0 says the group exists, /proc is asked
// whether any member is still alive. Without /proc (macOS), the group
// counts as alive, and the caller's deadline bounds the wait.
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
