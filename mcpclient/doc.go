// Package mcpclient connects an ACP session to its MCP servers: the ones the
// editor names in session/new, and the ones mm's configuration adds to every
// session. It offers their tools to the model as mcp__<server>__<tool> and
// calls them. The MCP protocol itself is the official Go SDK's
// (github.com/modelcontextprotocol/go-sdk); this package owns what is around
// it: starting and stopping the servers, their process groups, their stderr,
// the list of tools, and the naming.
//
// Each ACP session has its own Sessions value, and so its own connections
// and processes: one session never sees another's servers, and closing one
// session stops only its own servers.
//
// Servers start in the background, so that session/new is answered at once;
// their tools join as soon as a server lists them, and onChange tells the
// caller. A server that does not start, does not answer within the time
// limit of a connection attempt, or dies later is a warning (onWarning),
// never an error for the session: the session goes on with the other
// servers and the built-in tools.
//
// What a server lists is offered within bounds (offer.go, bound.go): a tool
// whose input schema no model server takes is left out, a server's tools
// past its MaxTools too, each with a warning; a page of tools/list is cut
// before the SDK decodes it. A call that is not answered within the
// server's Timeout is cancelled and fails.
//
// A server may ask its user to open a page during a tool call (MCP's URL
// mode elicitation, elicit.go): mm claims that capability only when the
// session's client shows pages (Options.ElicitURL), and the request goes to
// the Asker the call's context carries (WithAsker); anything else a server
// asks is declined.
//
// What it owns: for a stdio server, the process the SDK starts (in its own
// process group, marked with the session's environment entry, see
// internal/procs), everything left in that group, and the pipe that carries
// its stderr to the debug log; for an HTTP server, its HTTP transport and
// idle connections. Close gives all of that back: it returns once no process
// of the group and no goroutine of this package or of the SDK connections is
// left.
//
// A stdio server is gone when its output ends, which is when it exits. An
// HTTP server is gone only when the SDK ends its connection (the server
// forgot the session, for one); a request that fails on the network is an
// error of that call, and the next call tries again, since the server may
// be back by then.
//
// Out of reach: a process that a server moves out of its process group
// (setsid, a daemon) survives Close; the session's KillSession (by the
// environment mark) or mm's exit reaches it. A server that exits while a
// child it left still holds its stdout is seen as alive until that child
// exits too, since only the end of its output tells the SDK it is gone.
//
// Concurrency: all methods are safe for concurrent use. onChange and
// onWarning are called from the package's goroutines, never while a lock of
// this package is held, and never after Close has returned; they may call
// Tools and Call, but not Close, which waits for those goroutines.
package mcpclient
