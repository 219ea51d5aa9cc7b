package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// maxDrain bounds what is read and thrown away to keep a connection: the
// rest of a finished stream (its trailing [DONE], the chunked terminator)
// or of a refused answer. Past it, closing the connection is cheaper.
const maxDrain = 64 << 10

// drainTimeout bounds the wait for the rest of a finished stream: a server
// that sends its finish and then keeps the response open costs its
// connection, not the user's time.
const drainTimeout = 500 * time.Millisecond

// errDrainTimeout is the cause that ends a call's context when its drain
// takes too long; the call is over by then, so no one reports it.
var errDrainTimeout = errors.New("llm: drain timed out")

// streamBody watches a response body as langchaingo reads it. Read errors
// become ErrServer errors ("stream interrupted"); each complete line is
// checked too: with sse set, a malformed chunk or an error event fails the
// call instead of being skipped, and in every format a stream that ends
// without its finished line fails as cut short. Every byte read restarts
// the call's idle timer.
type streamBody struct {
	io.ReadCloser
	call     *call
	sse      bool
	finished func(line []byte) bool // nil: any end is a proper end
	base     string                 // the hostUse key to mark when the stream ends well

	// mu is held by Read, so that Close drains only when no Read is in
	// flight: langchaingo may close a body its reader goroutine still reads.
	mu       sync.Mutex
	partial  []byte // the incomplete last line read so far
	events   int    // data lines seen
	complete bool   // the finished line was seen
	eof      bool
}

func (b *streamBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.call.activity()
	}
	eof := errors.Is(err, io.EOF)
	if ferr := b.scan(p[:n], eof); ferr != nil {
		return 0, b.call.fail(ferr)
	}
	if err != nil && !eof {
		return n, b.call.fail(serverErr("stream interrupted: %s", describeTransportError(err)))
	}
	if eof && !b.eof {
		b.eof = true
		if b.finished != nil && !b.complete {
			// The bytes are sound lines: langchaingo still streams them,
			// so the user keeps the partial answer the error follows.
			return n, b.call.fail(earlyEndError())
		}
		markUsed(b.base)
	}
	return n, err
}

// Close drains what is left of a finished stream before closing it.
// langchaingo's OpenAI client stops reading at [DONE], before the body's
// end, and net/http closes a connection whose body was closed unread; the
// drain returns it to the pool instead.
func (b *streamBody) Close() error {
	b.call.stopIdle()
	if b.mu.TryLock() {
		if b.complete && !b.eof {
			b.drain()
		}
		b.mu.Unlock()
	}
	return b.ReadCloser.Close()
}

// drain reads the rest of the body, within maxDrain and drainTimeout.
func (b *streamBody) drain() {
	t := time.AfterFunc(drainTimeout, func() { b.call.abort(errDrainTimeout) })
	defer t.Stop()
	n, err := io.Copy(io.Discard, io.LimitReader(b.ReadCloser, maxDrain))
	if err == nil && n < maxDrain {
		b.eof = true
		markUsed(b.base)
	}
}

// scan checks the complete lines in data, keeping an incomplete tail for the
// next read; at EOF the tail is a line too, and an event stream without a
// single event is malformed (a JSON answer to a streaming request, an HTML
// page).
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
	if err == nil && b.sse && b.events == 0 {
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

// checkLine validates one line. Only SSE data lines carry JSON; llama.cpp
// reports failures mid-stream as "error:" lines, other servers as a data
// line holding an error object. An NDJSON line is only looked at for the
// stream's finish: langchaingo's Ollama client reports its error lines.
func (b *streamBody) checkLine(line []byte) error {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if !b.sse {
		b.see(line)
		return nil
	}
	switch {
	case bytes.HasPrefix(line, dataPrefix):
		b.events++
		payload := bytes.TrimSpace(line[len(dataPrefix):])
		if len(payload) == 0 {
			return nil
		}
		b.see(payload)
		if bytes.Equal(payload, doneMarker) {
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

// see notes whether line is the stream's finish.
func (b *streamBody) see(line []byte) {
	if !b.complete && b.finished != nil && b.finished(line) {
		b.complete = true
	}
}

// The finish detectors of the providers' streams. gjson reads the one
// value each needs without decoding the chunk (checkLine has validated
// it already).

// openAIFinished: a [DONE] line, or a chunk whose finish_reason is a string
// (servers send null in every chunk before the last). llama.cpp and vLLM
// send both; some proxies drop [DONE].
func openAIFinished(payload []byte) bool {
	return bytes.Equal(payload, doneMarker) || gjson.GetBytes(payload, "choices.0.finish_reason").Type == gjson.String
}

// anthropicFinished: the message_stop event, or the message_delta that
// carries the stop_reason (null in message_start).
func anthropicFinished(payload []byte) bool {
	return gjson.GetBytes(payload, "type").Str == "message_stop" || gjson.GetBytes(payload, "delta.stop_reason").Type == gjson.String
}

// ollamaFinished: the line with "done": true, which carries the usage.
func ollamaFinished(line []byte) bool {
	return gjson.GetBytes(line, "done").Type == gjson.True
}
