// Package stress is the engine of mmstress, the multi-session stress
// harness: it starts mm (in this process on in-memory pipes, or as `mm -acp`
// subprocesses on real pipes), opens many sessions, runs turns against the
// scripted model with a chosen mix (plain answers, bash, file edits,
// permission requests, cancels, model failures), checks every update it
// receives, and reports throughput, latencies (HDR histograms), memory and
// what was left behind.
//
// Concurrency: Run drives one goroutine per session; each runs its turns one
// after another, so a session has at most one turn in flight and every
// update of that session belongs to it. The checker is per session and is
// touched by the SDK's notification goroutine and the session's goroutine
// under the session's mutex.
package stress
