// Package tools owns mm's built-in tools: for each one its parameters (a Go
// struct whose JSON schema jsonschema-go infers, and against which every
// call is validated: args.go), the description the model reads, its ACP kind, the title and locations shown to
// the user, its permission class, and its execution. It also owns the path
// rules that the tools and the permission layer share: Windows/WSL path
// translation, resolution against a session's cwd, the sensitive-path globs
// (tools.sensitive) and the "outside the cwd" test.
//
// The package knows nothing of actors or of ACP. A caller parses a model's
// call with Prepare, shows the resulting Call (title, kind, locations, the
// edit Proposal) and asks permission where Call.Mutating or Call.AlwaysAsk
// says so, then executes it with Run and maps the Result to ACP itself.
//
// A tool's failure is a Result with Failed set and an explanation the model
// can act on; Go errors are returned only by Prepare (bad arguments, again
// worded for the model) and by constructors such as NewSensitive. Run never
// panics outward: a panic inside a tool becomes a failed Result.
//
// Concurrency: the package has no mutable global state of its own (the
// file writes share internal/tempfile's bounded record of the temporary
// files in flight and of the folders swept for stale ones). Tools are stateless
// values, and Prepare and Run may be called from any number of goroutines at
// once. Run blocks until its call is finished, and returns promptly once its
// context is cancelled: bash kills its whole process group (children and
// grandchildren) with SIGKILL, reaps bash, and waits (half a second at most)
// until no member of the group is alive. Run joins every goroutine it starts
// before it returns, so a finished call leaves nothing running behind it,
// except what a bash command deliberately left in the background on a normal
// exit, or moved out of its process group (setsid); see bash.md; and a
// fetch_content conversion that a cancel interrupted, which ends by itself
// within milliseconds (see package fetch).
package tools
