package procs

import (
	"bytes"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// proc is what /proc/<pid>/stat says of a process.
type proc struct {
	pid, ppid int
	zombie    bool
}

// list reads every process of /proc, this one excepted.
func list() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	out := make([]proc, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		f := bytes.Fields(b[i+2:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(string(f[1]))
		out = append(out, proc{pid: pid, ppid: ppid, zombie: f[0][0] == 'Z'})
	}
	return out
}

// KillSession kills every live process marked with SessionEnv(id) and
// returns how many it killed. Finding them reads all of /proc, so calls made
// while a pass runs are served together by the next one: stopping a
// thousand sessions at once reads /proc a few times, not a thousand.
func KillSession(id string) int {
	kills.mu.Lock()
	if kills.next == nil {
		kills.next = &killBatch{marks: map[string]int{}, done: make(chan struct{})}
	}
	mine := kills.next
	mine.marks[SessionEnv(id)] = 0
	if kills.running {
		kills.mu.Unlock()
		<-mine.done
		return mine.killed(id)
	}
	// This call runs the passes until no session waits.
	kills.running = true
	for kills.next != nil {
		b := kills.next
		kills.next = nil
		kills.mu.Unlock()
		b.run()
		kills.mu.Lock()
	}
	kills.running = false
	kills.mu.Unlock()
	return mine.killed(id)
}

var kills struct {
	mu      sync.Mutex
	next    *killBatch // the sessions waiting for the next pass
	running bool
}

// killBatch is one pass over /proc for several sessions.
type killBatch struct {
	marks map[string]int // environment entry → processes killed
	done  chan struct{}
}

func (b *killBatch) killed(id string) int {
	<-b.done
	return b.marks[SessionEnv(id)]
}

// run kills the processes marked for the batch's sessions. A marked
// process may fork while it is killed, so it looks again until a pass
// finds none.
func (b *killBatch) run() {
	defer close(b.done)
	for pass := 0; pass < 5; pass++ {
		n := 0
		for _, p := range list() {
			if p.zombie {
				continue
			}
			if mark := markOf(p.pid, b.marks); mark != "" && syscall.Kill(p.pid, syscall.SIGKILL) == nil {
				b.marks[mark]++
				n++
			}
		}
		if n == 0 {
			return
		}
	}
}

// markOf returns the entry of marks that the environment of pid holds, or
// "".
func markOf(pid int, marks map[string]int) string {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "" // gone, or not ours to read (then not ours to kill)
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if bytes.HasPrefix(kv, []byte(sessionVar+"=")) {
			if _, ok := marks[string(kv)]; ok {
				return string(kv)
			}
		}
	}
	return ""
}

// KillDescendants kills every live descendant of this process and returns
// how many it killed: for mm's exit, once its sessions are stopped. With
// the subreaper set, orphans are descendants too.
func KillDescendants() int {
	self := os.Getpid()
	total := 0
	for pass := 0; pass < 5; pass++ {
		procs := list()
		children := map[int][]int{}
		zombie := map[int]bool{}
		for _, p := range procs {
			children[p.ppid] = append(children[p.ppid], p.pid)
			zombie[p.pid] = p.zombie
		}
		n := 0
		for todo := children[self]; len(todo) > 0; {
			pid := todo[len(todo)-1]
			todo = append(todo[:len(todo)-1], children[pid]...)
			if !zombie[pid] && syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
		total += n
		if n == 0 {
			break
		}
	}
	return total
}

// BecomeSubreaper makes this process the child subreaper of everything it
// starts, and reaps the orphans that end from then on; stop ends the
// reaping. It is for mm's main, once per process.
func BecomeSubreaper(log *slog.Logger) (stop func(), err error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return func() {}, err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-sig:
			}
			reapOrphans(log)
			// At most a few passes a second, however many commands end:
			// a pass reads /proc.
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
		<-finished
	}, nil
}

// reapOrphans collects the exit status of every ended child that no Wait
// is owed to: the orphans re-parented to this process.
func reapOrphans(log *slog.Logger) {
	forking.Lock()
	defer forking.Unlock()
	self := os.Getpid()
	for _, p := range list() {
		if p.ppid != self || !p.zombie || isWaited(p.pid) {
			continue
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(p.pid, &ws, unix.WNOHANG, nil); err != nil && err != unix.ECHILD {
			log.Debug("reaping an orphan", "pid", p.pid, "err", err)
		}
	}
}
