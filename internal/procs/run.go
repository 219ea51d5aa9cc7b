package procs

import (
	"context"
	"io"
	"os"
	"os/exec"
	"time"
)

// These grace periods bound how long Run waits for a command's pipes once
// the command itself is over. Processes it left in the background (or that
// escaped its group) may hold a pipe open forever, and no caller must wait
// on them.
const (
	// DrainAfterExit is the wait for the pipes' end after the command
	// exits by itself: long enough for a writer that is just finishing,
	// short enough not to be felt.
	DrainAfterExit = 100 * time.Millisecond
	// ReapAfterKill bounds the wait, after the group was killed, for the
	// pipes' end and for the group's members to be dead. A killed process
	// dies as soon as the kernel schedules it, so this is normally a
	// matter of microseconds; the bound matters when a member is stuck in
	// an uninterruptible sleep (a hung NFS read), when a process that left
	// the group holds a pipe, or when /proc is missing.
	ReapAfterKill = 500 * time.Millisecond
)

// End says how a command run by Run ended.
type End int

const (
	// Exited: the command ended by itself (whatever its status).
	Exited End = iota
	// TimedOut: the time limit passed; its group was killed.
	TimedOut
	// Cancelled: the context ended; its group was killed.
	Cancelled
)

// IO is what Run connects to a command, and what it is told.
type IO struct {
	// Stdin is written to the command's stdin from a goroutine, then
	// closed; nil gives it /dev/null. A command that does not read it
	// does not block the run.
	Stdin []byte
	// Stdout receives what the command writes on stdout. It is written by
	// one goroutine at a time and is done with when Run returns.
	Stdout io.Writer
	// Stderr receives its stderr; nil sends stderr to Stdout, through the
	// same pipe, so that the two keep the order they were written in.
	Stderr io.Writer
	// Timeout kills the command's group once it passes; 0 sets no limit.
	Timeout time.Duration
	// Started, if set, is called once the process exists (and can be
	// killed), from Run's goroutine.
	Started func()
}

// Outcome is how a command run by Run ended: End, and for a command that
// was reaped, its ProcessState and the error of its Wait.
type Outcome struct {
	End     End
	State   *os.ProcessState
	WaitErr error
}

// Run runs cmd (made, with its Dir, Env and confinement, but not started,
// and with no Stdin, Stdout or Stderr of its own) in a Group of its own,
// with opts' input and outputs, and waits for it: until it exits, its time
// limit passes or ctx ends, when its whole group is killed. It returns an
// error only when the command could not start; nothing is left running
// then.
//
// The outputs go through pipes that Run owns rather than through writers
// os/exec would copy from: exec's Wait would then wait for every holder of
// a pipe, including grandchildren left in the background, and never return.
// Once the command is reaped, what is left in the pipes is read for a grace
// period at most (DrainAfterExit, or ReapAfterKill after a kill); after a
// kill, Run returns once no member of the group is alive (or that grace
// has passed), so that a caller that checks finds nothing left.
func Run(ctx context.Context, cmd *exec.Cmd, opts IO) (Outcome, error) {
	var opened []*os.File
	closeAll := func() {
		for _, f := range opened {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			opened = append(opened, r, w)
		}
		return r, w, err
	}
	outR, outW, err := pipe()
	if err != nil {
		return Outcome{}, err
	}
	errR, errW := outR, outW
	if opts.Stderr != nil {
		if errR, errW, err = pipe(); err != nil {
			closeAll()
			return Outcome{}, err
		}
	}
	var inR, inW *os.File
	if opts.Stdin != nil {
		if inR, inW, err = pipe(); err != nil {
			closeAll()
			return Outcome{}, err
		}
		cmd.Stdin = inR
	} else {
		cmd.Stdin = nil // os/exec connects a nil Stdin to /dev/null
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	// Its own group (a job object on Windows) lets a timeout or a cancel
	// kill the command with every child and grandchild at once.
	group := NewGroup(cmd)
	if err := group.Start(); err != nil {
		closeAll()
		return Outcome{}, err
	}
	defer group.Close()
	// The parent's copies of the child's ends must go: otherwise the
	// output pipes would never reach their end, and a command reading its
	// stdin to the end would wait forever.
	outW.Close()
	if errW != outW {
		errW.Close()
	}
	if inR != nil {
		inR.Close()
	}
	if opts.Started != nil {
		opts.Started()
	}

	stdinDone := make(chan struct{})
	if inW != nil {
		// Written from a goroutine: a large input does not fit in the
		// pipe, and a command that never reads its stdin must not block
		// the run.
		go func() {
			defer close(stdinDone)
			_, _ = inW.Write(opts.Stdin) // EPIPE when the command does not read: fine
			inW.Close()
		}()
	} else {
		close(stdinDone)
	}
	outDone := make(chan struct{})
	go func() { defer close(outDone); CopyPipe(outR, opts.Stdout) }()
	errDone := outDone
	if errR != outR {
		errDone = make(chan struct{})
		go func() { defer close(errDone); CopyPipe(errR, opts.Stderr) }()
	}
	waitDone := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		Done(cmd)
		waitDone <- err
	}()

	var expired <-chan time.Time
	if opts.Timeout > 0 {
		timer := time.NewTimer(opts.Timeout)
		defer timer.Stop()
		expired = timer.C
	}
	o := Outcome{End: Exited}
	select {
	case o.WaitErr = <-waitDone:
	case <-ctx.Done():
		o.End = Cancelled
		group.Kill()
		o.WaitErr = <-waitDone
	case <-expired:
		o.End = TimedOut
		group.Kill()
		o.WaitErr = <-waitDone
	}
	o.State = cmd.ProcessState

	// A write still pending is to a pipe that some leftover process holds
	// and does not read: give it up. Closing the pipe ends the write on
	// every system; Windows's pipes take no deadline.
	if inW != nil {
		inW.Close()
	}
	<-stdinDone
	grace := DrainAfterExit
	if o.End != Exited {
		grace = ReapAfterKill
	}
	deadline := time.Now().Add(grace)
	FinishPipe(outR, opts.Stdout, outDone, deadline)
	if errR != outR {
		FinishPipe(errR, opts.Stderr, errDone, deadline)
	}
	if o.End != Exited {
		// SIGKILL is delivered asynchronously: a member may still be on
		// its way out, its end of the pipe already closed, when the
		// command is reaped.
		group.WaitGone(deadline)
	}
	return o, nil
}
