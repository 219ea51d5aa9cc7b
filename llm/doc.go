// Package llm is mm's one interface to language models: a Model streams a
// completion (text and reasoning deltas, tool calls assembled from streamed
// fragments, usage, a normalised finish reason) under a context whose
// cancellation stops it promptly.
//
// It owns the providers behind that interface, chosen by Config.Provider:
//
//   - openai: any OpenAI-compatible server (llama.cpp's llama-server, vLLM,
//     LM Studio, Ollama's /v1, OpenAI itself), over langchaingo. The main
//     target is a local server, so no API key is needed.
//   - ollama: Ollama's native API over langchaingo; text only (see ollamaModel).
//   - anthropic: Anthropic's Messages API over langchaingo.
//   - scripted: a deterministic model that plays a YAML Script and needs no
//     server, for demos, tests and the stress harness. Package llmtest serves
//     the same scripts over HTTP as an OpenAI-compatible server, the fixture
//     for the openai provider.
//
// It also owns ProbeContextWindow, which asks a server for its context
// window, and EstimateTokens, the rough count used where a server reports
// no usage.
//
// Errors are for users: one line, at most about 300 characters. Failures of
// the model server (connection refused, an HTTP error status, a malformed
// or interrupted stream, a timeout) wrap ErrServer; a cancelled context
// yields an error matching context.Canceled. langchaingo's own error texts
// lose most of that, so an HTTP transport shared by the providers diagnoses
// failures itself (see call and guard).
//
// That transport also carries the HTTP providers' calls through a server's
// hiccups: a call that hears nothing for Config.IdleTimeout fails naming the
// timeout, the time its caller spends in emit not counted (a caller that
// reads slowly pauses the stream; it does not silence the server); a stream
// that ends without its finish (OpenAI's [DONE] or finish_reason,
// Anthropic's message_stop, Ollama's done) fails as ended early, the text
// streamed so far staying streamed; an event longer than langchaingo reads
// in one line (64 KiB; 512,000 bytes for Ollama), which a server that
// buffers sends, reaches it cut into events that mean the same when it is
// text, reasoning or tool-call arguments, and otherwise fails the call in
// one line, as does an event over 8 MiB (oversize.go); a request refused
// before any byte of its answer (HTTP 429, 502, 503, 529, connection
// refused) is sent again up to Config.Retries times, each wait announced as
// a DeltaNotice through emit, on the calling goroutine. Connections are
// kept alive in one pool, and a Warmer opens one ahead of a session's
// first call. The scripted model keeps the same idle timer, so that a
// script's stall or long sleep ends as a quiet server's call does.
//
// Concurrency: Model values and Scripts are safe for concurrent use by many
// goroutines; a Model holds no per-call state, and its calls share one pool
// of HTTP connections. Nothing in the package writes to standard output.
package llm
