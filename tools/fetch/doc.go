// Package fetch owns the network half of the agent's fetch_content tool: one
// HTTP(S) GET, bounded in time, redirects and body size, whose body is turned
// into text the model can read. HTML becomes Markdown (links made absolute
// against the final URL, the page title as a first heading), text and JSON
// pass through (JSON pretty-printed when it parses), and anything binary is
// refused with an explanation instead of being handed to the model as noise.
//
// The package does not own the tool itself: its schema, its description, the
// "output" argument and how a Page is shown to the model belong to the tool
// wrapper. Get's errors are nevertheless worded for the model, on one line and
// naming the URL, so that the wrapper can pass them on unchanged. The one
// exception is cancellation: when the caller's context ends, Get returns an
// error that wraps ctx.Err(), so that errors.Is(err, context.Canceled) lets
// the caller report a cancel rather than a failure.
//
// Concurrency: the package has no mutable global state apart from an
// HTML-to-Markdown converter that is built once and is safe for concurrent
// use. Get is safe for concurrent use, also with one shared *http.Client, and
// that sharing is the intended use: NewClient's keep-alive connections are
// reused by every call made with it. Get starts no goroutine of its own, and
// it closes the response body before it returns. What outlives a call is the
// client's idle keep-alive connections (and net/http's goroutines that serve
// them) until the client is garbage or its CloseIdleConnections is called.
package fetch
