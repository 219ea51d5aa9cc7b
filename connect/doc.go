// Package connect is `mm connect URL`: an editor's stdio bridged to a served mm over one
// WebSocket, so that an editor starts a remote mm with the command line it
// uses for a local one. Each message read on stdin is sent as one text
// frame; each frame received is written on stdout as one line. stdout
// carries nothing else; what mm connect has to say goes to stderr.
//
// Two JSON-RPC connections (jsonrpc.Conn), each answering the other's
// requests. The editor's reads stdin's lines (jsonrpc.Lines) and writes
// stdout's (jsonrpc.LineWriter); the server's reads the socket's text
// frames and writes each message as one frame (wsframe.go). A request of
// the editor's is sent on as the editor wrote it and waits in the editor
// connection's table of requests in flight; the server's answer, read on
// the other connection, takes it out of that table and goes to stdout as
// the server wrote it. The server's requests of the editor go the other
// way alike. mm connect's own requests (a reopen's, reopen.go) are calls
// of the server's connection, whose table keeps their answers from the
// editor. What is no JSON-RPC message, on stdin, is answered by the
// editor's connection as mm -acp answers it, and not sent on.
//
// Bounds. A line is read whole up to acp.maxLineBytes; a longer one is
// read to its end, dropped, and answered as mm -acp answers it. A frame is
// read whole up to twice acp.maxLineBytes (64 MiB at least; a longer one
// is dropped, saying so on stderr). Neither way has a queue: the next
// line is read once the socket took the last one (a slow server slows the
// reading of stdin), and the next frame once stdout took the last one (a
// slow editor slows the reading of the socket, and mm serve's stall
// timeout applies to it as to any client). The requests in flight are
// bounded each way (maxTracked): past it, the side's reading waits.
//
// The end. When stdin closes, what was sent is still answered, as mm -acp
// answers every request read before end of file: the turns in flight are
// cancelled (session/cancel), and the socket closes once every request
// sent has its answer, once the server closes it, or after Drain,
// whichever is first; then mm connect exits 0. mm connect closes the
// socket as a client that leaves: a close frame, 1000, whose reason says
// why (the editor closed stdin; a signal; the editor gone, its stdout
// broken), so that mm serve ends the connection at once rather than keep
// it for a resume. When the server refuses the connection, or closes it,
// mm connect writes one line on stderr saying why and exits 1. A
// connection that drops is resumed (resume.go); one the server can no
// longer resume is replaced by a new connection on which the editor's
// sessions are resumed (reopen.go); only a server gone for longer than
// serve.resumeTimeout ends mm connect, as a refusal does.
//
// Goroutines: the two connections' read loops (the editor's serves its
// messages by sending them on the socket, the server's by writing them on
// stdout); run, which waits for either to end, for the drain and for a
// signal; the pinger; a resume or reopen while one runs; the cancels at
// the end of stdin.
package connect
