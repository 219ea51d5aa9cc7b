package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

// streamBody watches a response body as langchaingo reads it, a line at
// a time. Read errors become ErrServer errors ("stream interrupted"); each
// complete line is checked too: with sse set, a malformed chunk or an error
// event fails the call instead of being skipped, and in every format a
// stream that ends without its finished line fails as cut short. Every
// byte read restarts the call's idle timer.
//
// A line reaches langchaingo only once complete, which costs no time: its
// scanner waits for the newline anyway. A line longer than the library
// reads (limit) reaches it rewritten by split into several that mean the
// same (oversize.go), or fails the call; a line is read up to maxEvent at
// most.
type streamBody struct {
	io.ReadCloser
	call     *call
	sse      bool
	finished func(line []byte) bool // nil: any end is a proper end
	base     string                 // the hostUse key to mark when the stream ends well
	limit    int                    // the longest line the library reads, its newline included
	split    splitter               // nil: a longer line fails the call

	// mu is held by Read, so that Close drains only when no Read is in
	// flight: langchaingo may close a body its reader goroutine still reads.
	mu       sync.Mutex
	line     []byte // the incomplete last line read so far
	out      []byte // checked lines not yet read by the library, from off
	off      int
	err      error  // what Read returns once out is read: io.EOF or the call's failure
	event    []byte // the SSE event line ("event: …") of the event being read
	events   int    // data lines seen
	complete bool   // the finished line was seen
	eof      bool
}

// watch wraps body, the answer of g's provider to call c.
func (g *guard) watch(body io.ReadCloser, c *call) *streamBody {
	return &streamBody{ReadCloser: body, call: c, sse: g.sse, finished: g.finished, base: g.baseURL,
		limit: g.lineLimit, split: g.split}
}

func (b *streamBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	for b.off == len(b.out) && b.err == nil {
		b.out, b.off = b.out[:0], 0
		if cap(b.out) > 2*b.limit {
			b.out = nil // the buffer of a rewritten event is not kept
		}
		b.fill(p)
	}
	if b.off == len(b.out) {
		return 0, b.err
	}
	n := copy(p, b.out[b.off:])
	b.off += n
	return n, nil
}

// fill reads from the body into p, and moves the complete lines it ends
// to out, checked; at the body's end, or when the call fails, it sets err.
func (b *streamBody) fill(p []byte) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.call.activity()
	}
	eof := errors.Is(err, io.EOF)
	if ferr := b.scan(p[:n], eof); ferr != nil {
		b.err = b.call.fail(ferr)
		return
	}
	if err != nil && !eof {
		b.err = b.call.fail(serverErr("stream interrupted: %s", describeTransportError(err)))
		return
	}
	if eof && !b.eof {
		b.eof = true
		b.err = io.EOF
		if b.finished != nil && !b.complete {
			// The lines before are sound: langchaingo still streams
			// them, so the user keeps the partial answer the error
			// follows.
			b.err = b.call.fail(earlyEndError())
			return
		}
		markUsed(b.base)
	}
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

// scan checks the complete lines in data and queues them for the library,
// keeping an incomplete tail for the next read; at EOF the tail is a line
// too, and an event stream without a single event is malformed (a JSON
// answer to a streaming request, an HTML page).
func (b *streamBody) scan(data []byte, eof bool) error {
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i]
		if len(b.line)+len(line) > maxEvent {
			return tooLongError()
		}
		if len(b.line) > 0 {
			b.line = append(b.line, line...)
			line = b.line
		}
		if err := b.take(line); err != nil {
			return err
		}
		b.line = b.line[:0]
		if cap(b.line) > b.limit {
			b.line = nil // nor is that of a long line
		}
		data = data[i+1:]
	}
	if len(b.line)+len(data) > maxEvent {
		return tooLongError()
	}
	b.line = append(b.line, data...)
	if !eof {
		return nil
	}
	var err error
	if len(b.line) > 0 {
		err = b.take(b.line)
		b.line = b.line[:0]
	}
	if err == nil && b.sse && b.events == 0 {
		err = serverErr("malformed stream: no events")
	}
	return err
}

// take checks a line and queues it for the library, rewritten if the
// library cannot read it whole.
func (b *streamBody) take(line []byte) error {
	if err := b.checkLine(line); err != nil {
		return err
	}
	if len(line) < b.limit {
		if b.sse {
			b.noteEvent(line)
		}
		b.out = append(append(b.out, line...), '\n')
		return nil
	}
	return b.rewrite(line)
}

var eventPrefix = []byte("event:")

// noteEvent keeps the event line of the SSE event a line belongs to, to
// repeat it before each event a long one is rewritten into.
func (b *streamBody) noteEvent(line []byte) {
	switch {
	case len(bytes.TrimSuffix(line, []byte("\r"))) == 0:
		b.event = b.event[:0]
	case bytes.HasPrefix(line, eventPrefix):
		b.event = append(b.event[:0], bytes.TrimSuffix(line, []byte("\r"))...)
	}
}

// rewrite queues a line longer than the library reads as the events split
// makes of it, each under the limit, or says why it cannot. In an SSE
// stream each event but the last ends with an empty line, and each but the
// first repeats the event line: the last ends where the long one did.
func (b *streamBody) rewrite(line []byte) error {
	line = bytes.TrimSuffix(line, []byte("\r"))
	payload := line
	if b.sse {
		if !bytes.HasPrefix(line, dataPrefix) {
			return oversizeError(len(line), b.limit, errors.New("not a data line"))
		}
		payload = bytes.TrimSpace(line[len(dataPrefix):])
	}
	if b.split == nil {
		return oversizeError(len(line), b.limit, errNotSplittable)
	}
	events, err := b.split(payload, b.limit/4)
	if err != nil {
		return oversizeError(len(line), b.limit, err)
	}
	start := len(b.out)
	prefix := 0
	if b.sse {
		prefix = len("data: ")
	}
	for i, e := range events {
		if b.sse {
			if i > 0 {
				b.out = append(b.out, '\n')
				if len(b.event) > 0 {
					b.out = append(append(b.out, b.event...), '\n')
				}
			}
			b.out = append(b.out, "data: "...)
		}
		if n := prefix + len(e); n >= b.limit {
			b.out = b.out[:start]
			return oversizeError(len(line), b.limit, fmt.Errorf("%s of it is not text or tool-call arguments", byteSize(n)))
		}
		b.out = append(append(b.out, e...), '\n')
	}
	return nil
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
