// Package lsp is the language-server side of mm's lsp tool: it starts the
// language servers a session needs, keeps them in step with the files on
// disk, asks them for definitions, references, hover text, document symbols
// and renames, and turns their answers into text the model reads and into
// whole-file edits.
//
// It owns:
//   - the servers' processes (server.go), one per language and Client,
//     started lazily with the session's cwd as workspace root and marked
//     with the session's id (package procs) so that mm's reaper and session
//     cleanup recognise them; each runs in its own process group, which is
//     killed when the server is stopped or found dead, so that helpers a
//     server spawned (tsserver, node workers) go with it;
//   - the JSON-RPC connection to each server, built from go.lsp.dev/jsonrpc2
//     (its Content-Length framing, read within bounds by frames in
//     frame.go) and go.lsp.dev/protocol (types, dispatchers and the handler
//     that answers the server's own requests, clientside.go);
//   - the bounds on what a server does to mm (frame.go, clientside.go,
//     pipes.go, pace.go): a message's header and body, the messages and
//     bytes read in a second, on stdout and stderr, the lines logged, the
//     answers waiting for the server to read them, the time a write may
//     wait (Config.Timeout). A server that breaks one is killed, and the
//     call in flight fails with "lsp: the go server misbehaved (…);
//     stopped", also logged as a warning. A call ends after Config.Timeout
//     whatever the server does;
//   - the documents each server has open (documents.go): a file is opened
//     with its content on disk before a request about it, and every open
//     file is compared with the disk before each later request, so that a
//     change made by another tool is seen; files that only appeared in
//     answers are watched by their size and time of change, and reported
//     with workspace/didChangeWatchedFiles when they change;
//   - the requests and the text made of their answers (actions.go):
//     locations as "path:line:column: text", hover as the server's Markdown,
//     symbols as an outline, a rename as whole-file edits;
//   - the conversion between the model's positions (1-based lines, columns
//     counted in characters) and LSP's (0-based, UTF-16 code units), and the
//     application of a rename's text edits (text.go).
//
// go.lsp.dev/protocol v0.12.0 gets some shapes wrong, and those messages
// are written or read here with small structs of this package, over the
// same connection: didChange (its change event always carries a range),
// definition (it reads only Location[]), hover (it reads only
// MarkupContent) and the reply to workspace/applyEdit (a bare boolean).
//
// It does not apply edits, ask permission or describe the tool to the
// model: the tool wrapper does that with the Result.
//
// Concurrency: a Client is safe for concurrent use. Each server's
// connection is read by one goroutine, jsonrpc2's, which also handles what
// the server sends of its own, in order and without blocking; one more
// goroutine, the answerer, writes the answers to the server's requests.
// Calls for different languages run in parallel; calls for the same
// language take turns, because the documents a server has open are shared
// state that one call must bring up to date before it asks its question.
// The work of a call runs in a goroutine of its own, so that Do returns as
// soon as its context is cancelled or its time is up even when the server
// stopped reading; that goroutine sends $/cancelRequest and gives the
// server back to the next call once its write ends, which takes
// Config.Timeout at most. Close cancels
// every call in flight, stops every server and returns only once their
// processes are reaped, their process groups have no living member and
// every goroutine the Client started has ended.
package lsp
