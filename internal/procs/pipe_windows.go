package procs

import (
	"io"
	"os"
	"time"
)

// FinishPipe lets the CopyPipe goroutine read the pipe to its end once the
// command is reaped, until deadline, and closes the pipe; readDone is
// closed when that goroutine has returned. Windows's anonymous pipes take
// no deadline, and a blocking reader has no poller latency to avoid; when
// the pipe is still held open at the deadline, closing it cancels the
// pending read (os cancels a pipe's I/O on Close) and fails the next one.
func FinishPipe(pr *os.File, _ io.Writer, readDone <-chan struct{}, deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-readDone:
	case <-t.C:
	}
	pr.Close()
	<-readDone
}
