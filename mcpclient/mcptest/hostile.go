// Package mcptest holds a hostile MCP server for tests: one written by hand,
// line by line, so that it can send what the official SDK's server refuses
// to send (a tool whose input schema is not an object schema, a hundred
// thousand tools, a call that is never answered). The tests of package
// mcpclient run it through their test server; the protocol tests run it in
// their own re-executed binary.
package mcptest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Modes of Serve.
const (
	// BadSchemas offers echo (a good tool) beside tools whose input schema
	// a model server refuses: {"type":5}, a string, an array, an object
	// schema whose properties are a string.
	BadSchemas = "badschemas"
	// ManyTools offers the number of tools given after a colon
	// ("tools:100000"), t0, t1, …, all in one page.
	ManyTools = "tools"
	// Hang offers the tool wait, whose calls are never answered.
	Hang = "hang"
)

// BadTools are the tools BadSchemas offers that no model server takes, by
// name, with their input schema.
var BadTools = map[string]string{
	"bad_number":     `{"type":5}`,
	"bad_string":     `"an object, honestly"`,
	"bad_array":      `[{"type":"object"}]`,
	"bad_properties": `{"type":"object","properties":"none"}`,
}

// Serve answers MCP requests read from in, a line each, on out, as mode
// says, until in ends. It answers initialize (with the tools capability),
// tools/list and tools/call; a notification gets no answer, and any other
// request an empty result.
func Serve(mode string, in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 1<<20)
	w := bufio.NewWriter(out)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(line, &m) == nil && m.ID != nil && m.Method != "" {
				result, answer := respond(mode, m.Method)
				if answer {
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", m.ID, result)
					if err := w.Flush(); err != nil {
						return err
					}
				}
			}
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// respond is the result of a request, and whether to answer at all.
func respond(mode, method string) (string, bool) {
	switch method {
	case "initialize":
		return `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1"}}`, true
	case "tools/list":
		return list(mode), true
	case "tools/call":
		if mode == Hang {
			return "", false
		}
		return `{"content":[{"type":"text","text":"called"}]}`, true
	}
	return `{}`, true
}

func list(mode string) string {
	var tools []string
	tool := func(name, schema string) {
		tools = append(tools, fmt.Sprintf(`{"name":%q,"description":"a tool","inputSchema":%s}`, name, schema))
	}
	switch {
	case mode == BadSchemas:
		tool("echo", `{"type":"object","properties":{"text":{"type":"string"}}}`)
		for _, name := range []string{"bad_number", "bad_string", "bad_array", "bad_properties"} {
			tool(name, BadTools[name])
		}
	case strings.HasPrefix(mode, ManyTools+":"):
		n, _ := strconv.Atoi(strings.TrimPrefix(mode, ManyTools+":"))
		for i := range n {
			tool("t"+strconv.Itoa(i), `{"type":"object","properties":{"x":{"type":"string"}}}`)
		}
	case mode == Hang:
		tool("wait", `{"type":"object"}`)
	}
	return `{"tools":[` + strings.Join(tools, ",") + `]}`
}
