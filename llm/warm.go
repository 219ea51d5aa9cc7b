package llm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mm-agent/mm/history"
)

// Warmer is implemented by models that can open their connection ahead of the first call.
//
// Warm puts a kept-alive connection to the model's server in the pool its
// calls share, so that the first prompt of a session does not pay for the
// TCP (and TLS) handshakes. It is cheap to call at every session creation:
// it does nothing when the server was used (a call or a warm-up finished)
// within the last 30 seconds. It blocks for at most two seconds, and
// ignores every failure: a server that is down is reported by the first
// real call. It is safe for concurrent use.
type Warmer interface {
	Warm(ctx context.Context)
}

// warmTimeout bounds a warm-up: it is a courtesy, never worth a wait.
const warmTimeout = 2 * time.Second

// warmFresh is how long a used connection is taken to be still pooled.
// Servers close idle connections after a while (llama-server and Ollama
// after minutes, proxies sooner); a warm-up per half minute at most costs
// one small request.
const warmFresh = 30 * time.Second

// hostUse maps a base URL to the time (Unix nanoseconds, in an
// *atomic.Int64) a connection to it last proved alive: a stream that ended
// well or a warm-up. It grows by one entry per configured server, which
// the configuration bounds.
var hostUse sync.Map

func lastUse(base string) *atomic.Int64 {
	if v, ok := hostUse.Load(base); ok {
		return v.(*atomic.Int64)
	}
	v, _ := hostUse.LoadOrStore(base, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// markUsed records that a connection to base was just used and pooled.
func markUsed(base string) {
	if base != "" {
		lastUse(base).Store(time.Now().UnixNano())
	}
}

// warm makes one GET of url, whose answer does not matter, through the
// shared pool, unless base was used within warmFresh. The first of several
// concurrent warm-ups claims the slot, so that sessions created together
// open one connection, not one each; a failed warm-up gives the claim back.
func warm(ctx context.Context, base, url string, header http.Header) {
	last := lastUse(base)
	prev := last.Load()
	now := time.Now().UnixNano()
	if now-prev < int64(warmFresh) || !last.CompareAndSwap(prev, now) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		last.CompareAndSwap(now, prev)
		return
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := sharedTransport().RoundTrip(req)
	if err != nil {
		last.CompareAndSwap(now, prev)
		return
	}
	// Read to the end, bounded, so that the connection is pooled.
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	resp.Body.Close()
	if err != nil || n == maxDrain {
		last.CompareAndSwap(now, prev)
		return
	}
	markUsed(base)
}

// rehearsalKey marks the context of a rehearsed call: the guard answers it
// with the provider's canned stream and sends nothing.
type rehearsalKey struct{}

// rehearsalRequest is a call small in every part, with one tool, so that
// each part's conversion and encoding runs.
var rehearsalRequest = Request{
	Messages: []history.Message{{Role: history.RoleSystem, Content: "-"}, {Role: history.RoleUser, Content: "-"}},
	Tools: []ToolDef{{Name: "t", Description: "-",
		Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)}},
	Temperature: -1,
}

// rehearse runs one call of m against its canned answer, within the
// process. A process's first call otherwise runs, while a person waits,
// code that nothing ran before: langchaingo's request encoding, its stream
// parser, the JSON codecs of their types, built on first use. Rehearsed at
// the first warm-up, the first prompt costs what the second does
// (BenchmarkFirstTurn in cmd/mm measures it).
func rehearse(ctx context.Context, m Model) {
	ctx = context.WithValue(ctx, rehearsalKey{}, true)
	_, _ = m.Stream(ctx, rehearsalRequest, func(Delta) {})
}

// rehearsed answers a rehearsed request with the provider's canned stream:
// a complete answer, read through the same streamBody as a real one.
func (g *guard) rehearsed(req *http.Request, c *call) *http.Response {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	body := g.watch(io.NopCloser(strings.NewReader(g.canned)), c)
	body.base = "" // no connection was used
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {g.cannedType}},
		Body:    body,
		Request: req,
	}
}

// The canned streams of the providers: one word, then the finish.
const (
	openAICanned = `data: {"id":"r","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}

data: {"id":"r","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}

data: [DONE]

`
	anthropicCanned = `event: message_start
data: {"type":"message_start","message":{"id":"r","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}

event: message_stop
data: {"type":"message_stop"}

`
	ollamaCanned = `{"model":"m","message":{"role":"assistant","content":"ok"},"done":false}
{"model":"m","message":{"role":"assistant","content":""},"done":true,"prompt_eval_count":1,"eval_count":1}
`
)
