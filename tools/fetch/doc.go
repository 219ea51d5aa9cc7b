// Package fetch owns the network half of the agent's fetch_content tool: one
// HTTP(S) GET, bounded in time, redirects and body size, whose body is turned
// into text the model can read. HTML becomes Markdown (links made absolute
// against the final URL, the page title as a first heading), text and JSON
// pass through (JSON pretty-printed when it parses), and anything binary is
// refused with an explanation instead of being handed to the model as noise.
//
// The conversion of HTML is bounded as well (parse.go, bound.go): the HTML
// text before it is parsed, the parse, and the tree before the converter
// sees it, so that a page written to hurt costs about what a large real page
// does. What a bound cut or simplified is said in Page.Notes.
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
// reused by every call made with it. Get closes the response body before it
// returns. It converts HTML in a goroutine of its own, so that a cancel or
// the timeout is answered at once; when Get returns that way, the goroutine
// is left to end by itself, which it does within milliseconds, because it
// sees the same cancel: the parse reads no further and the rest of the tree
// renders as nothing. Its CPU is then one pass of the library over the
// bounded tree at most, its memory that tree. What else outlives a call is
// the client's idle keep-alive connections (and net/http's goroutines that
// serve them) until the client is garbage or its CloseIdleConnections is
// called.
package fetch
