package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// A tool's parameters are one Go struct, the single source of what the
// model reads and of what a call is checked against: its JSON schema is
// inferred by jsonschema-go (field names from the json tags, required unless
// omitempty, descriptions from the jsonschema tags), completed by a few tags
// of mm's own, and every call is validated against it. The tags:
//
//	min:"1"            minimum, for a number or an integer
//	minItems:"1"       minItems, for an array
//	enum:"a,b,c"       the values a string may take
//	alias:"file_path"  other names models send for the argument
//
// The getters of a call's arguments are the struct's fields (argsOf).

// spec is one tool's parameters, built once from its struct.
type spec struct {
	tool     string
	typ      reflect.Type
	schema   json.RawMessage
	resolved *jsonschema.Resolved
	// params are the top-level arguments, in the struct's order, for the
	// checks whose errors teach the model the call's shape.
	params []param
}

// param is one top-level argument.
type param struct {
	name     string
	typ      string // the JSON type: string, number, integer, boolean, array, object; "" for any
	required bool
	min      *float64
	aliases  []string
}

// specFor builds the spec of a tool whose parameters are T. It panics on a
// struct it cannot describe: that is a bug, found by any test.
func specFor[T any](tool string) *spec {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{})
	if err != nil {
		panic(fmt.Sprintf("tools: the parameters of %s: %v", tool, err))
	}
	t := reflect.TypeFor[T]()
	complete(s, t)
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tools: the schema of %s: %v", tool, err))
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tools: the schema of %s: %v", tool, err))
	}
	sp := &spec{tool: tool, typ: t, schema: raw, resolved: resolved}
	for _, f := range reflect.VisibleFields(t) {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		ps := s.Properties[name]
		p := param{name: name, typ: ps.Type, required: !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero"), min: ps.Minimum}
		if a := f.Tag.Get("alias"); a != "" {
			p.aliases = strings.Split(a, ",")
		}
		sp.params = append(sp.params, p)
	}
	return sp
}

// complete applies mm's tags to the schema inferred for t, in its nested
// structs too, and writes a slice as an array: jsonschema-go allows null
// for one, which a model need not read (a null argument counts as absent).
func complete(s *jsonschema.Schema, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if len(s.Types) == 2 && s.Types[0] == "null" {
		s.Type, s.Types = s.Types[1], nil
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if s.Items != nil {
			complete(s.Items, t.Elem())
		}
	case reflect.Struct:
		for _, f := range reflect.VisibleFields(t) {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			ps := s.Properties[name]
			if ps == nil {
				continue
			}
			complete(ps, f.Type)
			if v := f.Tag.Get("min"); v != "" {
				m, err := strconv.ParseFloat(v, 64)
				if err != nil {
					panic(fmt.Sprintf("tools: min %q of %s.%s", v, t, f.Name))
				}
				ps.Minimum = &m
			}
			if v := f.Tag.Get("minItems"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil {
					panic(fmt.Sprintf("tools: minItems %q of %s.%s", v, t, f.Name))
				}
				ps.MinItems = &n
			}
			if v := f.Tag.Get("enum"); v != "" {
				for _, e := range strings.Split(v, ",") {
					ps.Enum = append(ps.Enum, e)
				}
			}
		}
	}
}

// schemaCopy is the schema the model reads, a fresh copy each call.
func (sp *spec) schemaCopy() json.RawMessage {
	return append(json.RawMessage(nil), sp.schema...)
}

// decodeArgs turns the model's argument text into a map, puts it in the
// form the schema describes (normalise), and checks it (checkArgs). The
// map is returned even when the check fails, so the caller can show what
// the model sent.
func decodeArgs(sp *spec, raw string) (map[string]any, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		raw = "{}"
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(raw))
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: the arguments are not valid JSON (%v); expected an object %s", sp.tool, err, sp.shape())
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: the arguments hold more than one JSON value; expected a single object %s", sp.tool, sp.shape())
	}
	args, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: the arguments must be a JSON object %s, not %s", sp.tool, sp.shape(), jsonTypeName(v))
	}
	if err := sp.normalise(args); err != nil {
		return args, err
	}
	return args, sp.checkArgs(args)
}

// normalise forgives, in place, what models commonly send that means the
// same as what the schema says: an argument under another tool's name for
// it (file_path for path, old_string for old_text), a null for an argument
// left out, a number or a boolean written as a string ("200", "true").
// Anything else is left for checkArgs to report.
func (sp *spec) normalise(args map[string]any) error {
	dropNulls(args)
	for _, p := range sp.params {
		for _, a := range p.aliases {
			v, ok := args[a]
			if !ok {
				continue
			}
			if _, both := args[p.name]; both {
				return fmt.Errorf("%s: %q and %q are the same argument; give %q only", sp.tool, a, p.name, p.name)
			}
			delete(args, a)
			args[p.name] = v
		}
		if s, ok := args[p.name].(string); ok {
			switch p.typ {
			case "number", "integer":
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
					args[p.name] = f
				}
			case "boolean":
				if b, err := strconv.ParseBool(strings.TrimSpace(s)); err == nil {
					args[p.name] = b
				}
			}
		}
		if f, ok := args[p.name].(float64); ok && p.typ == "integer" && math.Abs(f) > maxInteger {
			// An absurd count means "all of it"; it must not overflow an
			// int on its way into the struct.
			args[p.name] = math.Copysign(maxInteger, f)
		}
	}
	return nil
}

// maxInteger is the largest integer argument kept as given; a larger one
// is clamped to it.
const maxInteger = 1 << 40

// dropNulls removes the members whose value is null, in nested objects
// too: a model often sends null for an optional argument it does not use.
func dropNulls(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if x == nil {
				delete(v, k)
				continue
			}
			dropNulls(x)
		}
	case []any:
		for _, x := range v {
			dropNulls(x)
		}
	}
}

// checkArgs reports the first problem with args at the top level — an
// unknown argument, a missing required one, a wrong type, a number under
// its minimum — in words that restate the call's shape.
func (sp *spec) checkArgs(args map[string]any) error {
	known := make(map[string]bool, len(sp.params))
	for _, p := range sp.params {
		known[p.name] = true
	}
	// Unknown arguments are reported, not ignored: a misspelt optional
	// argument ("offest") would otherwise be silently dropped.
	for k := range args {
		if !known[k] {
			return fmt.Errorf("%s: unknown argument %q; the arguments are %s", sp.tool, k, sp.shape())
		}
	}
	for _, p := range sp.params {
		v, present := args[p.name]
		if !present || v == nil {
			if p.required {
				return fmt.Errorf("%s: missing required argument %q (%s); the arguments are %s", sp.tool, p.name, p.typeName(), sp.shape())
			}
			continue
		}
		if err := sp.checkType(p, v); err != nil {
			return err
		}
	}
	return nil
}

func (sp *spec) checkType(p param, v any) error {
	bad := func() error {
		return fmt.Errorf("%s: argument %q must be %s, got %s %s", sp.tool, p.name, withArticle(p.typeName()), jsonTypeName(v), short(v))
	}
	switch p.typ {
	case "string":
		if _, ok := v.(string); !ok {
			return bad()
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad()
		}
	case "array":
		if _, ok := v.([]any); !ok {
			return bad()
		}
	case "object":
		if _, ok := v.(map[string]any); !ok {
			return bad()
		}
	case "number", "integer":
		f, ok := v.(float64)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			return bad()
		}
		if p.typ == "integer" && f != math.Trunc(f) {
			return bad()
		}
		if p.min != nil && f < *p.min {
			return fmt.Errorf("%s: argument %q must be at least %v, got %v", sp.tool, p.name, *p.min, f)
		}
	}
	return nil
}

// validate checks args against the whole schema with jsonschema-go: what
// the top-level checks and the tool's own checks did not already say (a
// nested item's type, a value outside an enum) is reported here.
func (sp *spec) validate(args map[string]any) error {
	err := sp.resolved.Validate(args)
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: the arguments do not fit the schema: %s; the arguments are %s", sp.tool, schemaError(err), sp.shape())
}

// validatingRE finds the schema locations jsonschema-go's errors go
// through, outermost first.
var validatingRE = regexp.MustCompile(`validating (/[^:]*): `)

// schemaError words a jsonschema-go error for the model: where (as
// "entries[].content") and what, without the chain of schema locations.
func schemaError(err error) string {
	msg := err.Error()
	where := ""
	if m := validatingRE.FindAllStringSubmatchIndex(msg, -1); len(m) > 0 {
		last := m[len(m)-1]
		where = msg[last[2]:last[3]]
		msg = msg[last[1]:]
	}
	where = strings.ReplaceAll(where, "/items", "[]")
	where = strings.ReplaceAll(where, "/properties/", ".")
	where = strings.TrimPrefix(where, ".")
	if i := strings.IndexByte(msg, ':'); i > 0 && !strings.Contains(msg[:i], " ") {
		msg = strings.TrimSpace(msg[i+1:]) // the keyword: "type: …"
	}
	if where == "" || where == "/" {
		return msg
	}
	return where + ": " + msg
}

// decodeInto fills a new value of the tool's struct from args, which have
// passed checkArgs: best effort, as encoding/json fills what fits. A tool
// whose nested items could be of the wrong type reads them from c.Args
// (plan, ask_user) and words its own errors.
func (sp *spec) decodeInto(args map[string]any) any {
	v := reflect.New(sp.typ).Interface()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(args) == nil {
		_ = json.Unmarshal(buf.Bytes(), v)
	}
	return v
}

// argsOf returns a call's arguments as its tool's struct: decoded by
// Prepare (or by Run for a call built by hand), or the zero value.
func argsOf[T any](c *Call) *T {
	if p, ok := c.params.(*T); ok {
		return p
	}
	return new(T)
}

func (p param) typeName() string {
	if p.typ == "" {
		return "value"
	}
	return p.typ
}

func withArticle(s string) string {
	if strings.IndexByte("aeiou", s[0]) >= 0 {
		return "an " + s
	}
	return "a " + s
}

// shape renders the arguments as {"path": string, "offset"?: integer}, the
// way the model is most likely to understand a correction.
func (sp *spec) shape() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, p := range sp.params {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", p.name)
		if !p.required {
			b.WriteByte('?')
		}
		b.WriteString(": ")
		b.WriteString(p.typeName())
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
