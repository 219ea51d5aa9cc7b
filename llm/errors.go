package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"unicode/utf8"
)

// maxErrorLen bounds an error message, in characters, so that it fits the
// one-line "internal error" a client shows.
const maxErrorLen = 300

// serverErr builds an ErrServer error whose text is a single bounded line,
// whatever the server sent.
func serverErr(format string, args ...any) error {
	msg := clip(oneLine(fmt.Sprintf(format, args...)), maxErrorLen-len(ErrServer.Error())-2)
	return fmt.Errorf("%w: %s", ErrServer, msg)
}

// clip cuts s to at most n characters, marking the cut with an ellipsis.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:max(n-1, 0)]) + "…"
}

// earlyEndError is the failure of a stream that stopped without its
// finish (a crashed or restarted server, a proxy that cut the response):
// what was streamed is only the start of an answer, so it is no success.
func earlyEndError() error {
	return serverErr("the model server ended the stream early")
}

// oneLine collapses every run of whitespace, newlines included, into one space.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// endedError is the error of a call whose context ended first. Cancellation
// is the caller's own doing, so it comes back as context.Canceled; a deadline
// means the server was too slow, so it is a server timeout that still
// matches context.DeadlineExceeded.
func endedError(ctx context.Context, where string) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: timeout (%s): %w", ErrServer, where, err)
	}
	return err
}

// describeTransportError names what went wrong below HTTP in words a user
// recognises, rather than Go's "dial tcp 127.0.0.1:9: connect: ..." chains.
func describeTransportError(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case refused(err):
		return "connection refused"
	case reset(err):
		return "connection reset"
	case errors.As(err, &dnsErr):
		return "cannot resolve host " + dnsErr.Name
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the server"
	default:
		return err.Error()
	}
}

// statusError reports an HTTP error status with the server's own message
// when the body carries one, else with the start of the body. note, when
// set, follows the message (" (after 3 retries)"); the message is clipped
// rather than the note, since the note is ours and short.
func statusError(code int, body []byte, note string) error {
	msg := errorMessage(body)
	if msg == "" {
		msg = strings.TrimSpace(string(body))
	}
	if msg == "" {
		msg = http.StatusText(code)
	}
	head := fmt.Sprintf("HTTP %d: ", code)
	room := maxErrorLen - len(ErrServer.Error()) - 2 - len(head) - utf8.RuneCountInString(note)
	return serverErr("%s%s%s", head, clip(oneLine(msg), room), note)
}

// errorMessage extracts the message from the error bodies servers send:
// {"error":"..."} (Ollama), {"error":{"message":"..."}} (OpenAI, Anthropic,
// llama.cpp, recent vLLM) and a bare {"message":"..."} (older vLLM,
// llama.cpp's "error:" stream events). It returns "" for anything else,
// including ordinary stream chunks.
func errorMessage(body []byte) string {
	var doc struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	if len(doc.Error) == 0 {
		return doc.Message
	}
	var text string
	if json.Unmarshal(doc.Error, &text) == nil {
		return text
	}
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(doc.Error, &obj) == nil {
		return obj.Message
	}
	return ""
}
