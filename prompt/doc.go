// Package prompt makes what a model reads before the conversation: the
// system message of a session (System), from mm's prompt in the size the
// model's window calls for (configs.SystemPrompt), the user's own prompt
// file, the skills, the project's instruction files (Finder: AGENTS.md
// from the git root down to the cwd, and a subfolder's once the model
// works there) and the environment block (Gather: date, system, a git
// snapshot, rg, the sandbox and approval policy).
//
// Concurrency: everything here is plain functions and values. Gather,
// Finder.Discover, Finder.Nested and ReadOwn read the disk or run git and
// must run off an actor's Receive; System only builds a string.
//
// What the model reads is reviewed like code: testdata/ holds the
// assembled default system message for a small and a large window
// (TestSystemGolden, `go test ./prompt -run Golden -update`).
package prompt
