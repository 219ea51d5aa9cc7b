package mcpclient

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// What a server lists is offered to the model only within bounds: every
// tool goes into every model request, so one server must not make them
// all fail (a model server refuses a request whose tool has an input
// schema that is not an object schema, HTTP 400) nor fill them (a hundred
// thousand tools). A tool the model cannot take is left out, a server's
// tools past its MaxTools too, each with one warning per listing.

const (
	// maxSchemaBytes bounds a tool's input schema: larger ones are left
	// out. Real ones are a few KiB.
	maxSchemaBytes = 64 << 10
	// maxDescription bounds a tool's description; a longer one is cut.
	maxDescription = 8 << 10
	// warnNames is how many tools a warning names.
	warnNames = 4
	// quoteBytes is how much of a refused schema a warning quotes.
	quoteBytes = 48
)

// checkSchema returns the tool's input schema as the model sees it, or why
// no model server would take it.
func checkSchema(schema any) (json.RawMessage, string) {
	if schema == nil {
		return emptySchema, ""
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, "cannot be written as JSON"
	}
	if string(b) == "null" {
		return emptySchema, ""
	}
	if len(b) > maxSchemaBytes {
		return nil, fmt.Sprintf("%d KiB, over %d KiB", len(b)>>10, maxSchemaBytes>>10)
	}
	var s struct {
		Type       any             `json:"type"`
		Properties json.RawMessage `json:"properties"`
		Required   json.RawMessage `json:"required"`
	}
	if b[0] != '{' || json.Unmarshal(b, &s) != nil || s.Type != "object" ||
		(s.Properties != nil && s.Properties[0] != '{') ||
		(s.Required != nil && json.Unmarshal(s.Required, new([]string)) != nil) {
		return nil, quote(b)
	}
	return b, ""
}

// quote is the start of a refused schema, for a warning.
func quote(b []byte) string {
	if len(b) <= quoteBytes {
		return string(b)
	}
	cut := quoteBytes
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + "…"
}

// cutDescription keeps the first maxDescription bytes of a description.
func cutDescription(d string) string {
	if len(d) <= maxDescription {
		return d
	}
	cut := maxDescription
	for cut > 0 && !utf8.RuneStart(d[cut]) {
		cut--
	}
	return d[:cut] + "…"
}

// offer collects the tools of one listing of a server: the ones offered,
// and what was left out, for the warnings.
type offer struct {
	srv   Server
	max   int
	tools []Tool
	// left are the first tools left out, as "name (why)", and nLeft how
	// many were.
	left  []string
	nLeft int
	// full is set once a tool past max was listed.
	full bool
}

func newOffer(srv Server) *offer {
	return &offer{srv: srv, max: maxTools(srv)}
}

// maxTools is how many tools of srv are offered at most.
func maxTools(srv Server) int {
	if srv.MaxTools <= 0 {
		return DefaultMaxTools
	}
	return srv.MaxTools
}

// add takes a listed tool; false means the offer is full and the listing
// may stop.
func (o *offer) add(t Tool, why string) bool {
	if why != "" {
		o.nLeft++
		if len(o.left) < warnNames {
			o.left = append(o.left, fmt.Sprintf("%s (%s)", t.Remote, why))
		}
		return true
	}
	if len(o.tools) == o.max {
		o.full = true
		return false
	}
	o.tools = append(o.tools, t)
	return true
}

// warnings are the one-line warnings of the listing.
func (o *offer) warnings() []string {
	var out []string
	if o.nLeft > 0 {
		noun := "tools"
		if o.nLeft == 1 {
			noun = "tool"
		}
		msg := fmt.Sprintf("MCP server %q: %d %s left out, their input schema is not an object schema a model takes: %s",
			o.srv.Name, o.nLeft, noun, strings.Join(o.left, ", "))
		if more := o.nLeft - len(o.left); more > 0 {
			msg += fmt.Sprintf(" and %d more", more)
		}
		out = append(out, msg)
	}
	if o.full {
		out = append(out, fmt.Sprintf("MCP server %q lists more than %d tools (mcp.maxTools); only its first %d are offered", o.srv.Name, o.max, o.max))
	}
	return out
}
