package lsptest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Record is one line of the record file.
type Record struct {
	PID    int             `json:"pid"`
	Method string          `json:"method,omitempty"`
	ID     json.RawMessage `json:"id,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// Child is the pid of the child started with -child.
	Child int `json:"child,omitempty"`
	// Cwd, PGID and Session describe the server, in the "start" record:
	// its working directory, process group (0 on Windows) and MM_SESSION_ID.
	Cwd     string `json:"cwd,omitempty"`
	PGID    int    `json:"pgid,omitempty"`
	Session string `json:"session,omitempty"`
}

// ReadRecords reads a record file; a missing file has no records.
func ReadRecords(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("record %q: %w", line, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// write appends a record, in one write so that records from a crashed and
// a restarted server do not mix.
func (f *fake) write(r Record) {
	if f.record == nil {
		return
	}
	r.PID = os.Getpid()
	b, _ := json.Marshal(r)
	_, _ = f.record.Write(append(b, '\n'))
}

func readMessage(r *bufio.Reader) ([]byte, error) {
	length := -1
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimSpace(line)
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			length, err = strconv.Atoi(strings.TrimSpace(value))
			if err != nil {
				return nil, err
			}
		}
	}
	if length < 0 {
		return nil, fmt.Errorf("no Content-Length")
	}
	body := make([]byte, length)
	_, err := io.ReadFull(r, body)
	return body, err
}

func (f *fake) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	fmt.Fprintf(f.out, "Content-Length: %d\r\n\r\n%s", len(b), b)
}

func (f *fake) reply(id json.RawMessage, result any) {
	f.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (f *fake) fail(id json.RawMessage, code int, msg string) {
	f.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}
