package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
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
type call struct {
	omitTemperature bool

	mu  sync.Mutex
	err error
}

type callKey struct{}

// beginCall attaches a fresh call to ctx. omitTemperature asks the transport
// to strip the temperature langchaingo always sends (0 when unset), so that
// the server's default applies.
func beginCall(ctx context.Context, omitTemperature bool) (context.Context, *call) {
	c := &call{omitTemperature: omitTemperature}
	return context.WithValue(ctx, callKey{}, c), c
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
// returns: the context's end first (langchaingo may report a cancelled
// stream as a short success), then the transport's diagnosis, then whatever
// langchaingo said, as a one-line ErrServer.
func (c *call) result(ctx context.Context, err error, where string) error {
	if ctx.Err() != nil {
		return endedError(ctx, where)
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
// failures and error statuses into one-line ErrServer errors, checks the
// response stream as it is read, and strips the temperature on request.
type guard struct {
	baseURL string // shown in connection errors
	// sse says the response is a server-sent event stream to validate.
	sse bool
	// temperaturePath is where the request body holds the temperature.
	temperaturePath []string
}

func newHTTPClient(g *guard) *http.Client {
	return &http.Client{Transport: g}
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	c, ok := req.Context().Value(callKey{}).(*call)
	if !ok {
		// Every provider request comes from a Stream call, which attaches
		// a call; this only keeps any other request from crashing.
		c = &call{}
	}
	if c.omitTemperature {
		r, err := withoutKey(req, g.temperaturePath)
		if err != nil {
			return nil, c.fail(serverErr("cannot rewrite request: %v", err))
		}
		req = r
	}
	resp, err := sharedTransport().RoundTrip(req)
	if err != nil {
		if req.Context().Err() != nil {
			return nil, err
		}
		return nil, c.fail(serverErr("%s (%s)", describeTransportError(err), g.baseURL))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, c.fail(statusError(resp.StatusCode, body))
	}
	resp.Body = &streamBody{ReadCloser: resp.Body, call: c, sse: g.sse}
	return resp, nil
}

// withoutKey returns a copy of req whose JSON body lacks the key at path.
func withoutKey(req *http.Request, path []string) (*http.Request, error) {
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	if body, err = deleteJSONKey(body, path); err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r, nil
}

// deleteJSONKey removes the member at path from a JSON object.
func deleteJSONKey(doc []byte, path []string) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	inner, ok := obj[path[0]]
	switch {
	case !ok:
		return doc, nil
	case len(path) == 1:
		delete(obj, path[0])
	default:
		sub, err := deleteJSONKey(inner, path[1:])
		if err != nil {
			return nil, err
		}
		obj[path[0]] = sub
	}
	return json.Marshal(obj)
}

// streamBody watches a response body as langchaingo reads it. Read errors
// become ErrServer errors ("stream interrupted"); with sse set, each complete
// line is checked too, so that a malformed chunk or an error event fails the
// call instead of being skipped.
type streamBody struct {
	io.ReadCloser
	call    *call
	sse     bool
	partial []byte // the incomplete last line read so far
	events  int    // data lines seen
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.sse {
		if ferr := b.scan(p[:n], errors.Is(err, io.EOF)); ferr != nil {
			return 0, b.call.fail(ferr)
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return n, b.call.fail(serverErr("stream interrupted: %s", describeTransportError(err)))
	}
	return n, err
}

// scan checks the complete lines in data, keeping an incomplete tail for the
// next read; at EOF the tail is a line too, and a stream without a single
// event is malformed (a JSON answer to a streaming request, an HTML page).
func (b *streamBody) scan(data []byte, eof bool) error {
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i]
		if len(b.partial) > 0 {
			b.partial = append(b.partial, line...)
			line = b.partial
		}
		if err := b.checkLine(line); err != nil {
			return err
		}
		b.partial = b.partial[:0]
		data = data[i+1:]
	}
	b.partial = append(b.partial, data...)
	if !eof {
		return nil
	}
	err := b.checkLine(b.partial)
	b.partial = b.partial[:0]
	if err == nil && b.events == 0 {
		err = serverErr("malformed stream: no events")
	}
	return err
}

var (
	dataPrefix  = []byte("data:")
	errorPrefix = []byte("error:")
	doneMarker  = []byte("[DONE]")
	errorKey    = []byte(`"error"`)
)

// checkLine validates one SSE line. Only data lines carry JSON; llama.cpp
// reports failures mid-stream as "error:" lines, other servers as a data
// line holding an error object.
func (b *streamBody) checkLine(line []byte) error {
	line = bytes.TrimSuffix(line, []byte("\r"))
	switch {
	case bytes.HasPrefix(line, dataPrefix):
		b.events++
		payload := bytes.TrimSpace(line[len(dataPrefix):])
		if len(payload) == 0 || bytes.Equal(payload, doneMarker) {
			return nil
		}
		if !json.Valid(payload) {
			return serverErr("malformed stream: %s", payload)
		}
		if bytes.Contains(payload, errorKey) {
			if msg := errorMessage(payload); msg != "" {
				return serverErr("%s", msg)
			}
		}
	case bytes.HasPrefix(line, errorPrefix):
		payload := bytes.TrimSpace(line[len(errorPrefix):])
		if msg := errorMessage(payload); msg != "" {
			return serverErr("%s", msg)
		}
		return serverErr("%s", payload)
	}
	return nil
}
