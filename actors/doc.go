// Package actors is mm's actor system, built on protoactor-go.
//
// It owns:
//   - the session actor (session.go), one per ACP session, the only owner and
//     mutator of that session's history, cwd, remembered permission answers,
//     usage totals and current turn; its turn flow is in turn.go, its tool
//     phase in tools.go, cancellation in cancel.go, usage in usage.go;
//   - the session handle (handle.go) through which the edge starts, numbers,
//     cancels and stops a session's prompts;
//   - the turn serializer (turns.go), one per Runtime, which grants at most
//     turns.concurrency slots at a time, FIFO across sessions; a turn gives
//     its slot back while a person answers it (a permission request);
//   - the model actor (model.go), one per session, whose goroutine streams
//     from llm, paced by the session's Budget (budget.go), and whose stop
//     cancels that stream;
//   - the tool worker (toolworker.go), one per tool call, whose goroutine
//     prepares the call, asks permission when it must, and runs it;
//   - the session's persistence (persist.go), its check that it still
//     holds the session before a turn (holds.go), its sandbox policy
//     (sandbox.go), compression (compact.go),
//     slash commands (commands.go), replay (replay.go) and prompt text
//     (prompt.go);
//   - the dispatcher (dispatcher.go) that runs every mailbox of a Runtime.
//
// Concurrency: actors never block in Receive. Blocking work (a model stream,
// a command, an @mention lookup) runs in a goroutine under a context the
// owning actor cancels when it stops, and reports back with plain-data
// messages. Code outside the actor system (the ACP edge in package
// protocol) talks to sessions only through Session and Runtime methods,
// which are safe for concurrent use; it may wait on futures, actors never
// do. Everything a session says to the client goes through the Outbox, in
// order for that session, so a turn's reply is delivered only after its
// updates are written. Every goroutine a model or tool actor starts is
// counted, so Shutdown returns only once streams are closed and commands'
// process groups are killed.
package actors
