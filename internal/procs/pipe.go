package procs

import (
	"io"
	"os"
)

// A command's output goes to a pipe its runner owns, rather than to an
// io.Writer that os/exec would copy from: exec's Wait would then wait for
// every holder of the pipe, including grandchildren left in the background,
// and never return. CopyPipe reads it while the command runs, FinishPipe
// once it is reaped.

// CopyPipe copies the pipe into w until a read fails: its end, its
// deadline, or (on Windows) its closing.
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
