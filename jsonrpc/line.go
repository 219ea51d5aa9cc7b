package jsonrpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/coder/acp-go-sdk"
)

// Framing on a stream (stdio, mm connect's stdin): one message per line.

// HeadBytes is how much of a line too long to be read is kept: enough to
// read its id and answer it.
const HeadBytes = 4 << 10

// ReadLine reads one line from r, without its newline. A line longer than
// max bytes is read to its end and dropped: only its size and its first
// HeadBytes are returned (line is nil), so that it can be answered
// (LineTooLong) and the stream read on.
func ReadLine(r *bufio.Reader, max int) (line, head []byte, size int, err error) {
	return ReadLineInto(r, max, nil)
}

// ReadLineInto is ReadLine reading into buf's array when it has room (buf's
// contents are dropped), for a reader that is done with a line before it
// reads the next (mmstress); a reader that keeps lines calls ReadLine.
func ReadLineInto(r *bufio.Reader, max int, buf []byte) (line, head []byte, size int, err error) {
	line = buf[:0]
	for {
		frag, err := r.ReadSlice('\n')
		size += len(frag)
		if size <= max+1 {
			line = append(line, frag...)
		} else {
			if line != nil {
				head = line[:min(len(line), HeadBytes)]
			}
			line = nil
			if len(head) < HeadBytes {
				head = append(head, frag[:min(len(frag), HeadBytes-len(head))]...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if n := len(frag); n > 0 && frag[n-1] == '\n' {
			size--
			if line != nil {
				line = line[:len(line)-1]
			}
		}
		return line, head, size, err
	}
}

// LineTooLong is mm's answer to a line of size bytes, longer than the limit
// acp.maxLineBytes (spelled limit): -32600 with the id read from head, the
// line's first bytes, as one line ending in a newline.
func LineTooLong(head []byte, size int, limit string) []byte {
	id := HeadID(head)
	if id == nil {
		id = json.RawMessage("null")
	}
	// Marshal cannot fail: HeadID returns valid JSON, the rest is strings.
	b, _ := json.Marshal(struct {
		JSONRPC string            `json:"jsonrpc"`
		ID      json.RawMessage   `json:"id"`
		Error   *acp.RequestError `json:"error"`
	}{"2.0", id, acp.NewInvalidRequest(map[string]any{"error": fmt.Sprintf(
		"the line is %d bytes, longer than acp.maxLineBytes (%s); it was skipped", size, limit)})})
	return append(b, '\n')
}

// HeadID reads the id of a message from the first bytes of its line (a
// line too long to be read whole): the members before the id must be
// complete in head. It returns nil when no id can be read there.
func HeadID(head []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if key == "id" {
			if ValidID(v) && string(v) != "null" {
				return v
			}
			return nil
		}
	}
	return nil
}

// ValidID says whether raw is a string, a number or null.
func ValidID(raw json.RawMessage) bool {
	switch c := raw[0]; {
	case c == '"', c == 'n', c == '-', c >= '0' && c <= '9':
		return true
	}
	return false
}
