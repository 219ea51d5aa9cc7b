// Package protocol is mm's ACP edge: acp-go-sdk's agent-side connection,
// the ingress in front of it, and the ordered writer behind it. It
// implements acp.Agent, turns requests into calls on the session handles of
// package actors, and writes what the sessions say back to the client.
//
// Files: ingress.go (the one way in: every stdin line read whole, decoded
// once, checked; prompts, cancels and session creation served in the order
// read, everything else passed to the SDK), agent.go (initialize, session/new,
// prompt, cancel), sessions.go (load, resume, list, close, fork, modes, the
// model selector), outbox.go (the sharded writer that keeps each session's
// updates and responses in order), serve.go (one connection from start to
// shutdown).
//
// Concurrency: the SDK's reader goroutine calls the ingress, which never
// blocks on a turn or on the client (it waits on stdout only to answer a
// line it refuses). The SDK calls the other request handlers each on a
// goroutine of its own; they may wait on the actors (futures are fine out
// here), actors never wait on the edge. The session table is guarded by a
// mutex; everything a session sends goes through the outbox.
package protocol
