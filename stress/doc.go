// Package stress is the engine of mmstress, the multi-session stress
// harness: it starts mm (in this process on in-memory pipes, as `mm -acp`
// subprocesses on real pipes, as an `mm serve` it drives over WebSocket
// connections, which may also be one already running, or as several `mm
// serve` joined as one cluster, one of which it may kill mid-run), opens many
// sessions, runs turns against the scripted model with a chosen mix (plain
// answers, bash, file edits, permission requests, cancels, model
// failures), checks every update it receives, and reports throughput,
// latencies (HDR histograms), CPU time, memory and what was left behind.
//
// Concurrency: Run drives one goroutine per session; each runs its turns one
// after another, so a session has at most one turn in flight and every
// update of that session belongs to it. Each connection is a jsonrpc.Conn
// with one read loop (Conn.Run), whose handler (rpc.Serve) hands every
// notification to its session's tracker in arrival order and answers mm's
// permission requests from goroutines of their own; its calls and
// notifications may be made from any goroutine. The checker is per session and is touched by the connection's
// reader and the session's goroutine under the session's mutex. With
// -kill-node, a timer goroutine kills the node; the sessions' goroutines
// count their prompts' ends in the killer under its mutex.
package stress
