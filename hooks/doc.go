// Package hooks runs the shell commands that the configuration attaches to
// two moments of a session: before a tool call (preToolCall), which a hook
// may deny, and after an asked agent has answered (postAsk), which a hook
// may rewrite.
//
// The package owns the whole life of a hook's process: it starts each hook
// line with `bash -c` in the session's working directory, in a process group
// of its own and marked with the session's mark (procs.SessionEnv), writes
// the event to its stdin as one JSON object, reads at most 64 KiB of its
// stdout and of its stderr, and kills its whole group when the timeout
// passes or the caller's context is cancelled. It never writes to os.Stdout,
// which carries mm's JSON-RPC stream: everything it has to say goes to the
// logger it is given.
//
// Hooks are advisory and fail open. A hook that cannot be started, exits
// with a non-zero status, times out or prints something that is not JSON is
// reported with one Warn line and is otherwise ignored: the tool call goes
// ahead, the answer is kept. A broken hook script must not be able to stop
// every session from working; a hook that wants to block says so, in JSON.
//
// Concurrency: a Runner holds no mutable state, so any number of goroutines
// may call its methods at once, as long as its fields are not changed after
// it is first used. Each call waits for the hooks it runs (and, when it had
// to kill them, for their process group to be gone, within a short bound)
// and leaves no goroutine behind when it returns.
package hooks
