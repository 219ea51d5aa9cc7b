// Package protocol is mm's ACP edge. It implements acp.Agent over the
// acp-go-sdk connection, turns requests into messages for the session actors
// of package actors, and writes what they say back to the client.
//
// Files: agent.go (initialize, session/new, prompt, cancel), sessions.go
// (load, resume, list, close, fork, modes, the model selector), prompt.go
// (session/prompt served off the wire, decoded once), wire.go (the line
// filter on stdin and the writer on stdout), outbox.go (the sharded, per
// session ordered writer of session updates), encode.go (the hot updates
// encoded directly), content.go (prompt flattening and @path attachments),
// serve.go (one connection from start to shutdown).
//
// Concurrency: the SDK calls each request handler in its own goroutine and
// notifications one at a time, in order; prompts run on handler goroutines
// of our own (prompt.go). Handlers may block (waiting for a
// turn's end is fine here); actors never wait on the edge. The session table
// is guarded by a mutex; everything a session sends goes through the outbox.
package protocol
