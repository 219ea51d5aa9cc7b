// Package protocol is mm's ACP edge: the ingress (the connection's reader
// and the one way in), the method table it serves by, and the ordered
// writer behind it. It turns requests into calls on the session handles of
// package actors, and writes what the sessions say back to the client.
// acp-go-sdk supplies the types and their validation; it reads and writes
// nothing here.
//
// Files: ingress.go (the one way in: every message, split once into its
// members by jsonrpc.Parse, whatever carried it, checked, and served), methods.go (every method mm serves,
// named once: its params type, its handler, how it is placed), prompt.go (a
// prompt's params decoded in one pass; its $/cancel_request is found by
// its session among its turns), caller.go (the client as the
// hub's sessions know it: the session requests it serves, a connection's
// or, in a cluster, a client's of another node), agent.go (the
// connection's requests: initialize, logout; and session/new, prompt,
// cancel, served by its Caller), sessions.go (load, resume, list, close, modes,
// the model selector), fork.go, delete.go, answers.go (how every request
// is answered, failures included), outbox.go (the sharded writer that
// keeps each session's updates and responses in order), calls.go (mm's own
// requests to the client), serve.go (one connection from start to
// shutdown), forward.go (in a cluster, a session's requests to its node,
// and the Sink its answers and updates come back through).
//
// Order. Every request and notification of a session — session/prompt,
// session/cancel, session/set_mode, session/set_config_option,
// session/load, session/resume, session/close, session/fork and
// session/delete — is served by the ingress on its one goroutine, in the
// order read, and reaches the session's mailbox before the next line is
// read: the mailbox is the order from there, for the session's whole
// life. A stored session that is loaded or resumed gets its actor at once,
// which reads its own file (actors.Runtime.OpenSession) while its next
// requests wait in its mailbox; a session taken from another connection
// moves once its turns there have ended, keeping meanwhile what it is sent
// (actors.Session.Move); a close or a delete is sent to the session, which
// stops once the requests before it are served and its file is final
// (actors.Session.End). Work on a session that is not live (any more) —
// a close's answer, a delete, a fork's read of its stored file, a load —
// is done by an actor of its own (actors.Runtime.Behind), which watches
// the actor of the work on the same id before it and starts once that one
// is gone; the table keeps the latest by id (registry.Table.Behind). The
// order is the actors': nothing waits outside a mailbox.
// session/new is served in order too, so that its response goes out before
// the new session's first update. Not ordered, each on a goroutine of its
// own: initialize, authenticate and logout, which name no session and
// change none; session/list, which names no session and only reads files
// (a session's file is final once close has answered, so a list after a
// close sees it).
//
// Answers. Every request is answered once, through the outbox: by its
// session (a prompt's turn result, a mode or model outcome, a replay)
// behind the updates it caused, or by the edge (a bad request, an unknown
// session or method, a creation, the connection's requests). Once: the
// outbox expects every request the ingress read (actors.Reply.Seq) and
// takes the first answer to each, dropping any other. At most
// acp.maxPending requests are read and not yet answered (pending.go); past
// that the ingress waits and reads nothing.
//
// Concurrency: the ingress's goroutine never blocks on a turn or on the
// client, except to wait for a place in pending or to answer a line it
// refuses. The connection's requests run on goroutines of their own; they
// may wait on the actors (futures are fine out here), actors never wait on
// the edge. Work on a session that is no longer live (the wait for its
// file to be final, a stored file removed or read) runs on a goroutine of
// its own, chained per session in the registry. Everything a session
// sends goes through the outbox.
package protocol
