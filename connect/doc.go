// Package connect is `mm connect URL`: an editor's stdio bridged to a served mm over one
// WebSocket, so that an editor starts a remote mm with the command line it
// uses for a local one. Each line read on stdin is sent as one text frame;
// each frame received is written on stdout as one line. stdout carries
// nothing else; what mm connect has to say goes to stderr.
//
// Bounds. A line is read whole up to acp.maxLineBytes; a longer one is read
// to its end, dropped, and answered as mm -acp answers it. A frame is not
// held whole: it is copied to stdout as it arrives, through a 64 KiB
// buffer. Neither way has a queue: the next line is read once the socket
// took the last one (a slow server slows the reading of stdin), and the
// next frame once stdout took the last one (a slow editor slows the reading
// of the socket, and mm serve's stall timeout applies to it as to any
// client).
//
// The end. When stdin closes, what was sent is still answered, as mm -acp
// answers every request read before end of file: the turns in flight are
// cancelled (session/cancel), and the socket closes once every request
// sent has its answer, once the server closes it, or after connectDrain,
// whichever is first; then mm connect exits 0. When the server refuses the
// connection, or closes it, mm connect writes one line on stderr saying
// why and exits 1. A connection that drops is resumed (resume.go); one the
// server can no longer resume is replaced by a new connection on which the
// editor's sessions are resumed (reopen.go); only a server gone for
// longer than serve.resumeTimeout ends mm connect, as a refusal does.
//
// Goroutines: up reads stdin and writes the socket; down reads the socket
// and writes stdout; run waits for either to end, for the drain and for a
// signal. Writes to stdout go through lineOut (lineout.go), one at a time,
// each message one line.
package connect
