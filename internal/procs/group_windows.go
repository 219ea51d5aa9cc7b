package procs

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Group is a command's job object: the command and every process it
// starts, none of which can leave it (the job allows no breakaway); a
// cancel terminates them all at once. The job kills what is left in it when
// its handle is closed (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE): by Close, or by
// Windows when mm itself ends, however it ends.
//
// The command starts suspended and is put in the job before it runs: a
// process assigned right after it started could have started a child
// already, outside the job and out of reach.
type Group struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	job windows.Handle // 0 before Started and once closed
}

// NewGroup readies cmd, not started yet, to run in a job of its own.
func NewGroup(cmd *exec.Cmd) *Group {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= windows.CREATE_SUSPENDED
	return &Group{cmd: cmd}
}

// Started puts the command, started suspended (by Start, or elsewhere: an
// SDK's transport), in its job and lets it run. When that fails, the
// command is killed.
func (g *Group) Started() error {
	pid := uint32(g.cmd.Process.Pid)
	job, err := newJob(pid)
	if err != nil {
		_ = g.cmd.Process.Kill()
		return fmt.Errorf("cannot put the process in a job object: %w", err)
	}
	// The job is set before the command runs, so that a Kill from now on
	// reaches it.
	g.mu.Lock()
	g.job = job
	g.mu.Unlock()
	if err := resume(pid); err != nil {
		g.Close() // kills the suspended command
		return fmt.Errorf("cannot resume the process: %w", err)
	}
	return nil
}

// Kill terminates every process of the job; before Started or after Close,
// it does nothing. The exit code is 1, as os.Process.Kill gives.
func (g *Group) Kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.job != 0 {
		_ = windows.TerminateJobObject(g.job, 1)
	}
}

// Close closes the job, which kills what the command left in it: Windows
// has no /proc for KillSession to find it by later, and mm no other handle
// on it. Calling it again does nothing.
func (g *Group) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.job != 0 {
		_ = windows.CloseHandle(g.job)
		g.job = 0
	}
}

// hasLiving says whether a process of the job is still running. A job
// already closed has none: closing it killed them.
func (g *Group) hasLiving() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.job == 0 {
		return false
	}
	var info jobAccounting
	err := windows.QueryInformationJobObject(g.job, windows.JobObjectBasicAccountingInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info)), nil)
	return err != nil || info.ActiveProcesses > 0
}

// GroupID returns 0: Windows has no process groups.
func GroupID() int { return 0 }

// jobAccounting is JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, which
// x/sys/windows does not define.
type jobAccounting struct {
	TotalUserTime, TotalKernelTime                                                 int64
	ThisPeriodTotalUserTime, ThisPeriodTotalKernelTime                             int64
	TotalPageFaultCount, TotalProcesses, ActiveProcesses, TotalTerminatedProcesses uint32
}

// newJob makes a job that kills its processes when closed and puts the
// process pid in it. The pid names the command for sure: os/exec holds a
// handle on the process until Wait, which keeps the pid from being reused.
func newJob(pid uint32) (windows.Handle, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, err
	}
	limits := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE},
	}
	_, err = windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&limits)), uint32(unsafe.Sizeof(limits)))
	if err == nil {
		var p windows.Handle
		if p, err = windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, pid); err == nil {
			err = windows.AssignProcessToJobObject(job, p)
			_ = windows.CloseHandle(p)
		}
	}
	if err != nil {
		_ = windows.CloseHandle(job)
		return 0, err
	}
	return job, nil
}

// resume lets a process created suspended run. os/exec closes the handle
// of its main thread, its only thread yet, so the thread is found in a
// snapshot of the system's threads.
func resume(pid uint32) error {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(snap)
	te := windows.ThreadEntry32{Size: uint32(unsafe.Sizeof(windows.ThreadEntry32{}))}
	for err = windows.Thread32First(snap, &te); err == nil; err = windows.Thread32Next(snap, &te) {
		if te.OwnerProcessID != pid {
			continue
		}
		th, err := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, te.ThreadID)
		if err != nil {
			return err
		}
		_, err = windows.ResumeThread(th)
		_ = windows.CloseHandle(th)
		return err
	}
	return fmt.Errorf("no thread of process %d found: %w", pid, err)
}
