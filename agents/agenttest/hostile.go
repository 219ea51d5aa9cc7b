// Package agenttest holds a hostile ACP agent for tests: one written by
// hand, line by line, so that it can send what no SDK would (a burst of
// updates, a line of 12 MiB, a flood of requests). Tests run it as their
// own binary again, with the mode in an environment variable (Env).
package agenttest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Env is the environment variable that names the mode a test binary runs
// the hostile agent in.
const Env = "MM_TEST_HOSTILE_AGENT"

// Modes of Serve: how the agent answers session/prompt.
const (
	// Burst streams the number of agent_message_chunk updates given after
	// a colon ("burst:100000"), each the text "a ", then answers end_turn.
	Burst = "burst"
	// BigLine streams "before ", then one chunk on a line of the number of
	// MiB given, then " after", then answers end_turn.
	BigLine = "bigline"
	// BigResponse streams "partial", then answers on a line of the number
	// of MiB given.
	BigResponse = "bigresponse"
	// Flood streams chunks of 1 KiB until it is killed, and never answers,
	// cancel or not.
	Flood = "flood"
	// Requests sends the number of session/request_permission requests
	// given at once, waits for their answers, then answers end_turn.
	Requests = "requests"
	// Exit writes a line on stderr and exits with status 3.
	Exit = "exit"
)

// Main runs the hostile agent on stdin and stdout in the mode of Env and
// exits; it returns at once when Env is not set.
func Main() {
	mode := os.Getenv(Env)
	if mode == "" {
		return
	}
	if err := Serve(mode, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hostile agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
}

// Serve plays the agent of mode on in and out until in ends.
func Serve(mode string, in io.Reader, out io.Writer) error {
	kind, arg, _ := strings.Cut(mode, ":")
	n, _ := strconv.Atoi(arg)
	w := bufio.NewWriterSize(out, 1<<20)
	send := func(format string, args ...any) error {
		fmt.Fprintf(w, format+"\n", args...)
		return w.Flush()
	}
	chunk := func(text string) error {
		b, _ := json.Marshal(text)
		return send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%s}}}}`, b)
	}
	r := bufio.NewReaderSize(in, 1<<20)
	var prompt json.RawMessage // the id of the prompt waiting for answers (Requests)
	answered := 0
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		var m message
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if m.Method == "" && m.ID != nil { // an answer to one of the requests
			if answered++; answered == n && prompt != nil {
				if err := send(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn"}}`, prompt); err != nil {
					return err
				}
			}
			continue
		}
		if m.ID == nil {
			continue // session/cancel and the like: this agent does not care
		}
		switch m.Method {
		case "initialize":
			err = send(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]}}`, m.ID)
		case "session/new":
			err = send(`{"jsonrpc":"2.0","id":%s,"result":{"sessionId":"s1"}}`, m.ID)
		case "session/prompt":
			err = play(kind, n, m.ID, send, chunk)
			if kind == Requests {
				prompt = m.ID
			}
		default:
			err = send(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`, m.ID)
		}
		if err != nil {
			return err
		}
	}
}

// play answers a prompt as kind says.
func play(kind string, n int, id json.RawMessage, send func(string, ...any) error, chunk func(string) error) error {
	done := func() error { return send(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn"}}`, id) }
	switch kind {
	case Burst:
		for range n {
			if err := chunk("a "); err != nil {
				return err
			}
		}
		return done()
	case BigLine:
		if err := chunk("before "); err != nil {
			return err
		}
		if err := chunk(strings.Repeat("x", n<<20)); err != nil {
			return err
		}
		if err := chunk(" after"); err != nil {
			return err
		}
		return done()
	case BigResponse:
		if err := chunk("partial"); err != nil {
			return err
		}
		return send(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn","_meta":{"padding":%q}}}`, id, strings.Repeat("x", n<<20))
	case Flood:
		text := strings.Repeat("f", 1<<10)
		for {
			if err := chunk(text); err != nil {
				return err
			}
		}
	case Requests:
		for i := range n {
			err := send(`{"jsonrpc":"2.0","id":"p%d","method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"c%d","title":"request %d"},"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"},{"optionId":"reject","name":"Reject","kind":"reject_once"}]}}`, i, i, i)
			if err != nil {
				return err
			}
		}
		return nil
	case Exit:
		fmt.Fprintln(os.Stderr, "hostile agent: giving up")
		os.Exit(3)
	}
	return done()
}
