package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// argType is the JSON type an argument must have.
type argType int

const (
	argString argType = iota
	argNumber
	argInteger // a JSON number with no fractional part
	argBool
	argArray // its items are checked by the tool's prepare
)

func (t argType) String() string {
	switch t {
	case argString:
		return "string"
	case argNumber:
		return "number"
	case argInteger:
		return "integer"
	case argBool:
		return "boolean"
	case argArray:
		return "array"
	}
	return "value"
}

// param is one argument of a tool. The list of params is the single source
// for validation and for the error messages that teach the model the call's
// shape; the JSON schema beside it says the same for the model up front.
type param struct {
	name     string
	typ      argType
	required bool
	// min is the smallest accepted value of a number or integer; a
	// nonzero value enables the check.
	min float64
}

// decodeArgs turns the model's argument text into a map and checks it. The
// map is returned even when the check fails, so the caller can show what the
// model sent.
func decodeArgs(tool, raw string, params []param) (map[string]any, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		raw = "{}"
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(raw))
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: the arguments are not valid JSON (%v); expected an object %s", tool, err, shape(params))
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: the arguments hold more than one JSON value; expected a single object %s", tool, shape(params))
	}
	args, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: the arguments must be a JSON object %s, not %s", tool, shape(params), jsonTypeName(v))
	}
	return args, checkArgs(tool, args, params)
}

// checkArgs reports the first problem with args: an unknown argument, a
// missing required one, or a wrong type. A null value counts as absent,
// because models often send null for an optional argument they do not use.
func checkArgs(tool string, args map[string]any, params []param) error {
	known := make(map[string]bool, len(params))
	for _, p := range params {
		known[p.name] = true
	}
	// Unknown arguments are reported, not ignored: a misspelt optional
	// argument ("offest") would otherwise be silently dropped.
	for k := range args {
		if !known[k] {
			return fmt.Errorf("%s: unknown argument %q; the arguments are %s", tool, k, shape(params))
		}
	}
	for _, p := range params {
		v, present := args[p.name]
		if !present || v == nil {
			if p.required {
				return fmt.Errorf("%s: missing required argument %q (%s); the arguments are %s", tool, p.name, p.typ, shape(params))
			}
			continue
		}
		if err := checkType(tool, p, v); err != nil {
			return err
		}
	}
	return nil
}

func checkType(tool string, p param, v any) error {
	bad := func() error {
		return fmt.Errorf("%s: argument %q must be %s, got %s %s", tool, p.name, withArticle(p.typ.String()), jsonTypeName(v), short(v))
	}
	switch p.typ {
	case argString:
		if _, ok := v.(string); !ok {
			return bad()
		}
	case argBool:
		if _, ok := v.(bool); !ok {
			return bad()
		}
	case argArray:
		if _, ok := v.([]any); !ok {
			return bad()
		}
	case argNumber, argInteger:
		f, ok := v.(float64)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			return bad()
		}
		if p.typ == argInteger && f != math.Trunc(f) {
			return bad()
		}
		if p.min != 0 && f < p.min {
			return fmt.Errorf("%s: argument %q must be at least %v, got %v", tool, p.name, p.min, f)
		}
	}
	return nil
}

func withArticle(s string) string {
	if strings.IndexByte("aeiou", s[0]) >= 0 {
		return "an " + s
	}
	return "a " + s
}

// shape renders params as {"path": string, "offset"?: integer}, the way the
// model is most likely to understand a correction.
func shape(params []param) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, p := range params {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", p.name)
		if !p.required {
			b.WriteByte('?')
		}
		b.WriteString(": ")
		b.WriteString(p.typ.String())
	}
	b.WriteByte('}')
	return b.String()
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// short renders a value for an error message, cut so that a huge wrong
// value does not flood the model's context.
func short(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	s := strings.TrimSpace(buf.String())
	if len(s) > 80 {
		s = s[:validPrefix(s, 77)] + "..."
	}
	return s
}

// The getters below run after checkArgs, so the type assertions cannot
// fail for a present argument; absent or null arguments give the zero value.

func strArg(args map[string]any, name string) string {
	s, _ := args[name].(string)
	return s
}

func numArg(args map[string]any, name string) (float64, bool) {
	f, ok := args[name].(float64)
	return f, ok
}

func arrayArg(args map[string]any, name string) []any {
	a, _ := args[name].([]any)
	return a
}

func boolArg(args map[string]any, name string) bool {
	b, _ := args[name].(bool)
	return b
}
