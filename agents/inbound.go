package agents

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/rpcerr"
	"github.com/mm-agent/mm/jsonrpc"
)

// The inbound stands between an asked agent's stdout and acp-go-sdk's
// client connection, as protocol/ingress.go stands between mm's stdin and
// the SDK's agent side: the SDK reads its lines from it as it would from
// the pipe. Each line is read whole (up to the SDK's 10 MiB) and decoded
// once, then:
//
//   - session/update is delivered here, in the order read, to the client
//     (which keeps what it needs of the answer, within a bound): the SDK
//     would queue it, and its queue closes the connection past 1,024
//     notifications, an ordinary burst for an agent that streams;
//     delivering here also makes every update read before the prompt's
//     answer reach the client before the SDK sees that answer;
//   - the agent's other notifications are dropped (logged at debug level):
//     mm has no use for them, and they would fill that queue too;
//   - a request of the agent's takes a place among maxRequests in flight,
//     or is refused here: the SDK serves each on a goroutine of its own;
//   - a line too long for the SDK's reader, which would stop the
//     connection, is read to its end and dropped: a response becomes an
//     error response that says so, for the request that waits for it; a
//     request is refused; an update leaves a note in the answer;
//   - a line that is not JSON-RPC is dropped with a warning;
//   - everything else (responses, $/cancel_request) goes on to the SDK.
//
// Reading waits while an update is delivered: an agent that writes faster
// than mm reads is held back by its pipe.
//
// Concurrency: Read is called by the SDK's reader goroutine only; the
// writer is shared by the SDK and the inbound's refusals.

// sdkMaxLine is the longest line acp-go-sdk's reader takes, newline
// included; a longer one stops the connection.
const sdkMaxLine = 10 << 20

// maxRequests bounds the agent's requests being answered at once.
const maxRequests = 16

type inbound struct {
	r      *bufio.Reader
	client *client
	w      *wire
	log    *slog.Logger

	sdkLine []byte // the line the SDK is reading
	err     error
	// dropped counts the lines dropped or refused: a flood of them must
	// not be a flood of log lines.
	dropped int
}

func newInbound(r io.Reader, c *client, w *wire, log *slog.Logger) *inbound {
	return &inbound{r: bufio.NewReaderSize(r, 64<<10), client: c, w: w, log: log}
}

// Read gives the SDK the lines that are its to serve.
func (in *inbound) Read(p []byte) (int, error) {
	for len(in.sdkLine) == 0 {
		if in.err != nil {
			return 0, in.err
		}
		line, head, size, err := in.readLine()
		in.err = err
		switch {
		case size >= sdkMaxLine:
			in.sdkLine = in.overlong(head, size)
		case len(line) > 0:
			in.sdkLine = in.route(line)
		}
	}
	n := copy(p, in.sdkLine)
	in.sdkLine = in.sdkLine[n:]
	return n, nil
}

// readLine reads one line, without its newline (jsonrpc.ReadLine). A line
// of sdkMaxLine bytes or more, newline included, is read to its end and
// dropped: only its size and its first bytes are returned.
func (in *inbound) readLine() (line, head []byte, size int, err error) {
	return jsonrpc.ReadLine(in.r, sdkMaxLine-1)
}

// envelope is a JSON-RPC message with its parts undecoded; an absent part
// is nil.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// route serves a line, or returns it, newline added, for the SDK.
func (in *inbound) route(line []byte) []byte {
	body := bytes.TrimSpace(line)
	if len(body) == 0 {
		return nil
	}
	var m envelope
	if err := json.Unmarshal(body, &m); err != nil {
		in.warn(fmt.Sprintf("a line that is not JSON-RPC was dropped (%d bytes): %.80q", len(body), body))
		return nil
	}
	switch {
	case m.Method == "" && m.ID != nil:
		return append(line, '\n') // a response to one of mm's requests
	case m.ID == nil && m.Method == acp.ClientMethodSessionUpdate:
		in.update(m.Params)
		return nil
	case m.ID == nil && m.Method == "$/cancel_request":
		return append(line, '\n') // the SDK cancels the request it serves
	case m.ID == nil:
		in.log.Debug("a notification of the agent was dropped", "method", m.Method)
		return nil
	case m.Method == "":
		in.warn(fmt.Sprintf("a message that is neither a request nor a response was dropped: %.80q", body))
		return nil
	}
	if !in.w.take(m.ID) {
		in.refuse(m.ID, fmt.Sprintf("mm is already answering %d requests of this agent; %s was refused", maxRequests, m.Method))
		return nil
	}
	return append(line, '\n')
}

// update gives the client what it keeps of a session/update: the text of
// the agent's message.
func (in *inbound) update(params json.RawMessage) {
	var n struct {
		SessionID acp.SessionId `json:"sessionId"`
		Update    struct {
			Kind    string `json:"sessionUpdate"`
			Content struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"update"`
	}
	if err := json.Unmarshal(params, &n); err != nil {
		in.warn("a session/update that cannot be read was dropped: " + err.Error())
		return
	}
	if n.Update.Kind == "agent_message_chunk" && n.Update.Content.Type == "text" {
		in.client.chunk(n.SessionID, n.Update.Content.Text)
	}
}

// overlong serves a line too long for the SDK, of which only head was
// kept.
func (in *inbound) overlong(head []byte, size int) []byte {
	what := fmt.Sprintf("a line of %s, over %s", mib(size), mib(sdkMaxLine))
	id, method := headOf(head)
	in.warn(fmt.Sprintf("the agent sent %s (method %q); it was dropped", what, method))
	switch {
	case id != nil && method == "":
		// The answer to one of mm's requests: that request fails, saying
		// why.
		what = fmt.Sprintf("a response of %s, over %s", mib(size), mib(sdkMaxLine))
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": rpcerr.Internal("it sent "+what, nil)})
		return append(b, '\n')
	case id != nil:
		in.refuse(id, fmt.Sprintf("the request is %s, over the %s mm reads", mib(size), mib(sdkMaxLine)))
	default:
		in.client.note("[mm: the agent sent " + what + "; it was left out]")
	}
	return nil
}

// refuse answers a request of the agent's with an error.
func (in *inbound) refuse(id json.RawMessage, why string) {
	in.warn("a request of the agent was refused: " + why)
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": rpcerr.Internal(why, nil)})
	if err == nil {
		_, _ = in.w.Write(append(b, '\n'))
	}
}

// warn logs what was dropped: the first ones, then one in every power of
// two.
func (in *inbound) warn(msg string) {
	in.dropped++
	if n := in.dropped; n <= 8 || n&(n-1) == 0 {
		in.log.Warn(fmt.Sprintf("%s (%d dropped or refused so far)", msg, n))
	}
}

// headOf reads the id and the method of a message from the first bytes of
// its line: the members before the cut must be whole. A message whose
// method comes after its long part is taken for a response.
func headOf(head []byte) (id json.RawMessage, method string) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, ""
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		switch key {
		case "id":
			if len(v) > 0 && v[0] != 'n' && v[0] != '{' && v[0] != '[' {
				id = v
			}
		case "method":
			_ = json.Unmarshal(v, &method)
		}
	}
	return id, method
}

// mib writes a size in whole MiB, or in bytes when that would not tell it
// from the limit (a line of 10 MiB and a few bytes).
func mib(n int) string {
	if n%(1<<20) == 0 || n >= sdkMaxLine+1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// wire is the agent's stdin, written by the SDK and by the inbound's
// refusals, a whole message at a time. It counts the agent's requests in
// flight: one takes a place when it is read, and gives it back when its
// response is written.
type wire struct {
	w       io.Writer
	writeMu sync.Mutex // one message at a time

	mu       sync.Mutex
	inFlight map[string]bool // by id; maxRequests at most
}

func newWire(w io.Writer) *wire { return &wire{w: w, inFlight: map[string]bool{}} }

// take takes a place for a request; false when there is none.
func (w *wire) take(id json.RawMessage) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := idKey(id)
	if w.inFlight[key] {
		return true // the same id again: the SDK answers it as it sees fit
	}
	if len(w.inFlight) >= maxRequests {
		return false
	}
	w.inFlight[key] = true
	return true
}

// Write writes one message: the SDK writes each with one call.
func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	if len(w.inFlight) > 0 {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method *string         `json:"method"`
		}
		if json.Unmarshal(p, &m) == nil && m.ID != nil && m.Method == nil {
			delete(w.inFlight, idKey(m.ID))
		}
	}
	w.mu.Unlock()
	// An agent that reads nothing blocks its writers here, and not take.
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	return w.w.Write(p)
}

// idKey compares ids as every connection of mm does (jsonrpc.IDKey).
func idKey(id json.RawMessage) string { return jsonrpc.IDKey(id) }
