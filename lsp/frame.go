package lsp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.lsp.dev/jsonrpc2"
)

// The bounds on what a server writes: whatever it sends, reading it costs
// at most one message's memory and a bounded share of a core.
const (
	// maxHeader bounds the header of a message, all its lines: servers send
	// Content-Length and at most Content-Type.
	maxHeader = 4 << 10
	// maxMessage bounds the body of a message. The largest honest answers
	// (the references of a symbol used everywhere in a monorepo, the outline
	// of a generated file) are a few MiB.
	maxMessage = 32 << 20
	// A second of reading takes at most floodMessages messages or
	// floodBytes bytes (budget, pace.go).
	floodMessages = 2000
	floodBytes    = 32 << 20
)

// errMisbehaved marks the error of a server stopped for breaking a bound.
var errMisbehaved = errors.New("the language server misbehaved")

// misbehavior is that error, in the words the model and the user read.
type misbehavior struct {
	lang, why string
}

func (m *misbehavior) Error() string {
	return fmt.Sprintf("lsp: the %s server misbehaved (%s); stopped", m.lang, m.why)
}

func (m *misbehavior) Unwrap() error { return errMisbehaved }

// frames is a server's connection as jsonrpc2 reads it: messages framed by
// a Content-Length header as jsonrpc2.NewStream frames them, but read
// within bounds (maxHeader, maxMessage, a budget a second), since the
// library's reader grows a header line, and allocates a body, as large as
// the server says. Writes are the library's, one at a time. A server that
// breaks a bound is reported to misbehave, which stops it, and the read
// fails.
//
// It is read by one goroutine, the connection's, and written by the
// connection and the server's answerer.
type frames struct {
	out       jsonrpc2.Stream // writes, with the library's framing
	wmu       sync.Mutex      // one write at a time
	in        *bufio.Reader
	misbehave func(why string)

	closeOnce sync.Once
	closed    chan struct{} // wakes a read that waits for the next second
	pace      budget
}

func newFrames(rw io.ReadWriteCloser, misbehave func(why string)) *frames {
	closed := make(chan struct{})
	return &frames{
		out:       jsonrpc2.NewStream(rw),
		in:        bufio.NewReaderSize(rw, maxHeader),
		misbehave: misbehave,
		closed:    closed,
		pace:      budget{msgs: floodMessages, bytes: floodBytes, closed: closed, window: time.Now()},
	}
}

// Read reads the next message, within the bounds.
func (f *frames) Read(context.Context) (msg jsonrpc2.Message, n int64, err error) {
	defer func() {
		// What the server wrote must not take mm down, even through a bug
		// of the decoder.
		if p := recover(); p != nil {
			msg, err = nil, f.fail(fmt.Sprintf("a message that made the reader panic: %v", p))
		}
	}()
	switch flood, err := f.pace.wait(); {
	case err != nil:
		return nil, 0, err
	case flood != "":
		return nil, 0, f.fail(flood)
	}
	length, n, err := f.header()
	if err != nil {
		return nil, n, err
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(f.in, body); err != nil {
		return nil, n, fmt.Errorf("read full of data: %w", err)
	}
	n += length
	f.pace.spend(1, n)
	msg, err = jsonrpc2.DecodeMessage(body)
	if err != nil {
		return nil, n, f.fail("a message that is not JSON-RPC: " + clip(oneLine(err.Error()), 100))
	}
	return msg, n, nil
}

// header reads a message's header and returns its Content-Length. The
// names and the parsing of the value are jsonrpc2's.
func (f *frames) header() (length, n int64, err error) {
	for {
		line, err := f.in.ReadSlice('\n')
		n += int64(len(line))
		if errors.Is(err, bufio.ErrBufferFull) || n > maxHeader {
			return 0, n, f.fail("a header over 4 KiB")
		}
		if err != nil {
			// The server closed its output, mid-header or between messages.
			return 0, n, fmt.Errorf("failed reading header line: %w", err)
		}
		text := strings.TrimSpace(string(line))
		if text == "" {
			break
		}
		name, value, ok := strings.Cut(text, ":")
		if !ok {
			return 0, n, f.fail(fmt.Sprintf("a header line %q", clip(text, 40)))
		}
		if name != jsonrpc2.HdrContentLength {
			continue
		}
		value = strings.TrimSpace(value)
		length, err = strconv.ParseInt(value, 10, 64)
		switch {
		case err != nil || length <= 0:
			return 0, n, f.fail(fmt.Sprintf("Content-Length %q", clip(value, 40)))
		case length > maxMessage:
			return 0, n, f.fail(fmt.Sprintf("a message of %d bytes, over the %d MiB limit", length, maxMessage>>20))
		}
	}
	if length == 0 {
		return 0, n, f.fail("a header without Content-Length")
	}
	return length, n, nil
}

// fail reports the server and returns the error that ends the reading.
func (f *frames) fail(why string) error {
	f.misbehave(why)
	return errors.New("the server misbehaved: " + why)
}

// Write writes a message, after the one being written if any.
func (f *frames) Write(ctx context.Context, msg jsonrpc2.Message) (int64, error) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	return f.out.Write(ctx, msg)
}

// Close closes the connection, which wakes a read or a write blocked on
// it, and a read waiting for the next window.
func (f *frames) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return f.out.Close()
}
