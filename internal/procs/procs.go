// Package procs keeps what mm's commands start from outliving them: the
// background jobs a finished command leaves, and the processes that left
// its process group (setsid, nohup, daemons).
//
// Every process a session starts carries SessionEnv(id) in its environment,
// and so do its descendants, wherever they move: KillSession finds them by
// that mark. On Linux, mm is the child subreaper of what it starts
// (BecomeSubreaper): an orphan is re-parented to mm instead of to init, so
// KillDescendants reaches everything at exit, mark or no mark, and the
// reaper collects the orphans' exit statuses as they end.
//
// Processes that mm starts itself and waits for (exec.Cmd) go through Start
// and Done, so that the reaper never takes an exit status their Wait is
// owed.
//
// A command runs in a Group, which a cancel kills whole: a process group
// on Linux and macOS, a job object on Windows.
//
// Out of reach: a process that clears its environment and leaves the group
// escapes KillSession until mm exits; on systems other than Linux there is
// no subreaper and no /proc, and only groups are killed (on Windows,
// nothing leaves a job).
//
// Concurrency: every function is safe for concurrent use.
package procs

import (
	"os/exec"
	"sync"
)

// sessionVar names the environment variable that marks a session's
// processes.
const sessionVar = "MM_SESSION_ID"

// SessionEnv is the environment entry that marks the processes of session
// id; commands can read it too.
func SessionEnv(id string) string { return sessionVar + "=" + id }

// waited holds the pids of the processes mm started and will wait for; the
// reaper leaves them alone. Starting holds forking's read lock across fork,
// the reaper its write lock across a pass, so a child that ends at once is
// never taken for an orphan.
var (
	forking sync.RWMutex
	waitMu  sync.Mutex
	waited  = map[int]struct{}{}
)

// Start starts cmd and records it as one whose Wait the caller will call;
// call Done after that Wait.
func Start(cmd *exec.Cmd) error {
	forking.RLock()
	defer forking.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	waitMu.Lock()
	waited[cmd.Process.Pid] = struct{}{}
	waitMu.Unlock()
	return nil
}

// Done forgets a process started with Start, once waited for.
func Done(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	waitMu.Lock()
	delete(waited, cmd.Process.Pid)
	waitMu.Unlock()
}

// isWaited says whether pid is a process started with Start not yet Done.
func isWaited(pid int) bool {
	waitMu.Lock()
	defer waitMu.Unlock()
	_, ok := waited[pid]
	return ok
}
