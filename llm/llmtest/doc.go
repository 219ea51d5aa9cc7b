// Package llmtest serves llm Scripts over real HTTP as an OpenAI-compatible
// chat completions server, the fixture that tests the openai provider end to
// end without a model.
//
// Server streams as llama-server and vLLM do: server-sent events with
// content, reasoning_content and tool-call fragments (a header with id and
// name, then the arguments in pieces), a finish chunk, a usage chunk when
// stream_options.include_usage asks for it, then [DONE]; or, once
// SetBuffered, as a server that buffers does: the reasoning, the text and
// each whole tool call in one event apiece, however long. Scripted error
// steps answer HTTP 500 with an OpenAI error body, garbage steps a malformed
// stream, stall steps hang after their first word, truncate steps end the
// stream without its finish; latency, token rate and sleep are honoured and
// end early when the client goes away or the server closes. It also answers
// llama.cpp's context-window probe (GET /props) and GET /v1/models, refuses
// prompts larger than a context window set with SetContextWindow as
// llama-server does, fails chosen requests on demand (FailNext), and
// records what clients sent and how many connections they opened, so that
// tests can assert on it.
package llmtest
