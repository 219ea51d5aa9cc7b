package llm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/tidwall/sjson"
)

// sharedTransport carries every HTTP provider's traffic. One pool, sized for
// thousands of concurrent sessions talking to one local server, avoids a
// connection per call (http.DefaultTransport keeps only two idle connections
// per host) and a pool per Model value.
var sharedTransport = sync.OnceValue(func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	return t
})

// call is the state of one model call that its HTTP requests share through
// their context. The transport records there the first failure it diagnoses,
// because langchaingo's clients rephrase transport errors ("network error:
// failed to reach API server"), drop HTTP error bodies that are not JSON and
// silently skip malformed stream lines; the provider returns the recorded
// diagnosis instead.
//
// The call also owns its own context, a child of the caller's: the idle
// timer cancels it when the server goes quiet, and end cancels it when the
// call returns. Only the end of the parent is the caller's cancel.
type call struct {
	omitTemperature bool
	// failed are the ids of the tool calls whose results failed, for a
	// provider that flags them (guard.markFailed).
	failed  map[string]bool
	parent  context.Context
	cancel  context.CancelCauseFunc // nil for a call made outside Stream
	retries int
	backoff time.Duration
	// notify tells the user about the call (a retry wait); nil when no one
	// listens. It is called on the goroutine that makes the HTTP request,
	// and is set before that request starts.
	notify func(text string)

	idle     time.Duration
	timerMu  sync.Mutex
	timer    *time.Timer // nil without an idle timeout
	timerOff bool        // the stream is over: no read may restart the timer
	// holds counts the waits of ours under way (see hold): while there is
	// one, the timer is stopped and no read restarts it.
	holds int

	mu  sync.Mutex
	err error
}

type callKey struct{}

// beginCall attaches a fresh call to ctx, configured by cfg. omitTemperature
// asks the transport to strip the temperature langchaingo always sends (0
// when unset), so that the server's default applies. The caller sets
// call.notify if it listens, wraps its emit with call.consumer, and must
// call end when done.
func beginCall(ctx context.Context, cfg Config, omitTemperature bool) (context.Context, *call) {
	c := &call{
		omitTemperature: omitTemperature,
		parent:          ctx,
		retries:         max(cfg.Retries, 0),
		backoff:         cfg.RetryBackoff,
		idle:            cfg.IdleTimeout,
	}
	if c.backoff <= 0 {
		c.backoff = time.Second
	}
	ctx, c.cancel = context.WithCancelCause(ctx)
	if c.idle > 0 {
		c.timer = time.AfterFunc(c.idle, c.idleExpired)
	}
	return context.WithValue(ctx, callKey{}, c), c
}

// idleExpired ends a call that received nothing for its idle timeout. The
// failure is recorded before the context ends, so that whatever error the
// cancelled request then produces, the call reports the timeout.
func (c *call) idleExpired() {
	c.abort(c.fail(serverErr("no answer for %s (model.idleTimeout)", c.idle)))
}

// abort ends the call's own context (not the caller's) with cause.
func (c *call) abort(cause error) {
	if c.cancel != nil {
		c.cancel(cause)
	}
}

// activity restarts the idle timer: the server answered something. During
// a hold it does not: the hold's end restarts the timer.
func (c *call) activity() {
	c.timerMu.Lock()
	defer c.timerMu.Unlock()
	if c.timer != nil && !c.timerOff && c.holds == 0 {
		c.timer.Reset(c.idle)
	}
}

// hold stops the idle timer while the call waits on its own side: a retry
// wait, or the caller's emit (see consumer). The silence of the server
// then is no failure of the server's. Holds nest, as the caller's emit of
// a retry notice and the retry wait itself may overlap (Anthropic's
// requests run on a goroutine of their own); release ends one.
func (c *call) hold() {
	c.timerMu.Lock()
	defer c.timerMu.Unlock()
	c.holds++
	if c.timer != nil {
		c.timer.Stop()
	}
}

// release ends a hold. When no other is left, the timer runs again for a
// whole timeout, as if the server had just answered: the time of the hold
// was never the server's to spend.
func (c *call) release() {
	c.timerMu.Lock()
	defer c.timerMu.Unlock()
	c.holds--
	if c.timer != nil && !c.timerOff && c.holds == 0 {
		c.timer.Reset(c.idle)
	}
}

// consumer returns emit wrapped in a hold: the time the caller takes with
// a delta is not counted as the server's silence. A caller may take long:
// mm's session waits in emit on its stream budget while the editor does
// not read its output. Meanwhile langchaingo reads at most a chunk ahead
// (its Ollama client calls back between reads; its OpenAI and Anthropic
// clients read on a goroutine that waits for the callback, or for relay,
// before handing over the next chunk), so the server goes unheard through
// no fault of its own; without the hold, a call that streams faster than
// the editor reads would end as "no answer for model.idleTimeout". Each
// provider passes every delta and notice through the emit this returns.
func (c *call) consumer(emit func(Delta)) func(Delta) {
	return func(d Delta) {
		c.hold()
		defer c.release()
		emit(d)
	}
}

// stopIdle stops the idle timer for good: the stream is over, so silence
// from now on is no failure.
func (c *call) stopIdle() {
	c.timerMu.Lock()
	defer c.timerMu.Unlock()
	c.timerOff = true
	if c.timer != nil {
		c.timer.Stop()
	}
}

// end releases the call: its timer and its context.
func (c *call) end() {
	c.stopIdle()
	c.abort(nil)
}

// fail records err if it is the call's first failure, and returns it.
func (c *call) fail(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
	return err
}

func (c *call) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// result turns the outcome of a langchaingo call into the error Stream
// returns: the caller's context's end first (langchaingo may report a
// cancelled stream as a short success), then the transport's diagnosis (an
// idle timeout among them, which cancels only the call's own context), then
// whatever langchaingo said, as a one-line ErrServer.
func (c *call) result(err error, where string) error {
	if c.parent.Err() != nil {
		return endedError(c.parent, where)
	}
	if f := c.failure(); f != nil {
		return f
	}
	if err != nil {
		return serverErr("%v", err)
	}
	return nil
}

// guard is the http.RoundTripper of every HTTP provider. It turns transport
// failures and error statuses into one-line ErrServer errors, retries what
// the server refused before answering (see retry.go), checks the response
// stream as it is read, and strips the temperature on request.
type guard struct {
	baseURL string // shown in connection errors; the key of hostUse
	// local says baseURL is on this machine (a loopback address): a
	// refused connection there means no server runs, and fails at once
	// with start, how to start one (absent).
	local bool
	start string
	// sse says the response is a server-sent event stream to validate;
	// otherwise it is newline-delimited JSON (Ollama).
	sse bool
	// finished says whether a line (an SSE data payload, or an NDJSON
	// line) ends the stream as a complete answer. A stream that reaches
	// its end without such a line was cut short.
	finished func(line []byte) bool
	// lineLimit is the longest line, its newline included, that the
	// provider's library reads; split rewrites a longer event into
	// several it reads (oversize.go).
	lineLimit int
	split     splitter
	// temperaturePath is where the request body holds the temperature.
	temperaturePath string
	// markFailed flags the results of the call's failed tools in the
	// request body, as the provider's API says (Anthropic's is_error);
	// nil for a provider without such a flag.
	markFailed func(body []byte, failed map[string]bool) ([]byte, error)
	// canned is the provider's complete answer to a rehearsal (warm.go),
	// of type cannedType.
	canned, cannedType string
}

func newHTTPClient(g *guard) *http.Client {
	return &http.Client{Transport: g}
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	c, ok := req.Context().Value(callKey{}).(*call)
	if !ok {
		// Every provider request comes from a Stream call, which attaches
		// a call; this only keeps any other request from crashing.
		c = &call{parent: req.Context()}
	}
	if c.omitTemperature {
		r, err := withoutKey(req, g.temperaturePath)
		if err != nil {
			return nil, c.fail(serverErr("cannot rewrite request: %v", err))
		}
		req = r
	}
	if len(c.failed) > 0 && g.markFailed != nil {
		r, err := withRewrittenBody(req, func(body []byte) ([]byte, error) { return g.markFailed(body, c.failed) })
		if err != nil {
			return nil, c.fail(serverErr("cannot rewrite request: %v", err))
		}
		req = r
	}
	if c.retries > 0 {
		r, err := replayable(req)
		if err != nil {
			return nil, c.fail(serverErr("cannot read request: %v", err))
		}
		req = r
	}
	if req.Context().Value(rehearsalKey{}) != nil {
		return g.rehearsed(req, c), nil
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		r := req
		if attempt > 0 {
			var err error
			if r, err = rewound(req); err != nil {
				return nil, c.fail(serverErr("cannot resend request: %v", err))
			}
		}
		resp, err := sharedTransport().RoundTrip(r)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			if refused(err) && g.local {
				return nil, c.fail(absent(g.baseURL, g.start))
			}
			if refused(err) && attempt < c.retries {
				if err := c.wait(ctx, backoff(c.backoff, attempt), "model server unreachable (connection refused)", attempt); err != nil {
					return nil, err
				}
				continue
			}
			where := g.baseURL
			if attempt > 0 {
				where += ", after " + retriesText(attempt)
			}
			return nil, c.fail(serverErr("%s (%s)", describeTransportError(err), where))
		}
		c.activity() // the status line and headers count as an answer
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			resp.Body = g.watch(resp.Body, c)
			return resp, nil
		}
		body := discard(resp.Body)
		wait, hinted := retryAfter(resp.Header, time.Now())
		switch {
		case !retryable(resp.StatusCode):
			return nil, c.fail(statusError(resp.StatusCode, body, ""))
		case hinted && wait > maxRetryWait:
			// A wait that long is an outage or a quota, not a hiccup:
			// better to say so now than to hold the turn.
			return nil, c.fail(statusError(resp.StatusCode, body, fmt.Sprintf(" (the server asks to retry in %d s)", ceilSeconds(wait))))
		case attempt >= c.retries:
			note := ""
			if attempt > 0 {
				note = " (after " + retriesText(attempt) + ")"
			}
			return nil, c.fail(statusError(resp.StatusCode, body, note))
		}
		if !hinted {
			wait = backoff(c.backoff, attempt)
		}
		reason := fmt.Sprintf("model server busy (HTTP %d)", resp.StatusCode)
		if err := c.wait(ctx, wait, reason, attempt); err != nil {
			return nil, err
		}
	}
}

// discard reads the start of a refused answer's body, for its message, and
// then drains a bounded rest and closes it, so that its connection goes
// back to the pool.
func discard(body io.ReadCloser) []byte {
	defer body.Close()
	start, _ := io.ReadAll(io.LimitReader(body, 4096))
	io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	return start
}

// replayable returns req, or a copy whose body can be read again
// (GetBody), so that a refused request can be sent anew. langchaingo's
// bodies are in-memory readers that net/http already knows how to rewind;
// anything else is read once into memory.
func replayable(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody || req.GetBody != nil {
		return req, nil
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	return withBody(req, body), nil
}

// rewound is a copy of a replayable req with its body at the start again.
func rewound(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	return r, nil
}

// withBody is a copy of req that sends body, which it can send again.
func withBody(req *http.Request, body []byte) *http.Request {
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r
}

// withoutKey returns a copy of req whose JSON body lacks the key at path.
func withoutKey(req *http.Request, path string) (*http.Request, error) {
	return withRewrittenBody(req, func(body []byte) ([]byte, error) { return deleteJSONKey(body, path) })
}

// rewritten returns a copy of req whose body is edit's rewrite of it.
func withRewrittenBody(req *http.Request, edit func([]byte) ([]byte, error)) (*http.Request, error) {
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	if body, err = edit(body); err != nil {
		return nil, err
	}
	return withBody(req, body), nil
}

// deleteJSONKey removes the member at path (dot-separated, as sjson
// reads it) from a JSON object, leaving every other byte as it was: the
// body is mostly the history and the tool schemas, which decoding and
// encoding again cost more than the rest of a local model call.
func deleteJSONKey(doc []byte, path string) ([]byte, error) {
	return sjson.DeleteBytes(doc, path)
}
