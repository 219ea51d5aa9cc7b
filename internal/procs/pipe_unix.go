//go:build unix

package procs

import (
	"io"
	"os"
	"syscall"
	"time"
)

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
