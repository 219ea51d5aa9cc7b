package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/mm-agent/mm/history"
)

func TestBuiltinAndLookup(t *testing.T) {
	want := []string{"bash", "read_file", "write_file", "edit_file", "read_skill", "plan", "ask_user", "ask_agent", "fetch_content", "lsp"}
	kinds := map[string]Kind{"bash": KindExecute, "read_file": KindRead, "write_file": KindEdit, "edit_file": KindEdit,
		"read_skill": KindRead, "plan": KindOther, "ask_user": KindOther, "ask_agent": KindOther, "fetch_content": KindFetch, "lsp": KindRead}
	var got []string
	for _, tool := range Builtin() {
		got = append(got, tool.Name())
		if tool.Kind() != kinds[tool.Name()] {
			t.Errorf("%s: kind %q, want %q", tool.Name(), tool.Kind(), kinds[tool.Name()])
		}
		if l, ok := Lookup(tool.Name()); !ok || l.Name() != tool.Name() {
			t.Errorf("Lookup(%q) failed", tool.Name())
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Builtin() = %v, want %v", got, want)
	}
	if _, ok := Lookup("rm_rf"); ok {
		t.Error("Lookup found an unknown tool")
	}
}

// TestSchemasFromStructs: each tool's schema, which the model reads, is the
// one inferred from its parameters' struct, a closed object whose every
// property is described, and the checks read the same struct.
func TestSchemasFromStructs(t *testing.T) {
	for _, tool := range Builtin() {
		t.Run(tool.Name(), func(t *testing.T) {
			var schema struct {
				Type                 string                    `json:"type"`
				Properties           map[string]map[string]any `json:"properties"`
				Required             []string                  `json:"required"`
				AdditionalProperties *bool                     `json:"additionalProperties"`
			}
			if err := json.Unmarshal(tool.Schema(), &schema); err != nil {
				t.Fatalf("schema is not valid JSON: %v", err)
			}
			if schema.Type != "object" || schema.AdditionalProperties == nil || *schema.AdditionalProperties {
				t.Errorf("schema must be a closed object: %s", tool.Schema())
			}
			sp := tool.(builtin).spec()
			var required []string
			for _, p := range sp.params {
				prop, ok := schema.Properties[p.name]
				if !ok {
					t.Errorf("param %q missing from the schema", p.name)
					continue
				}
				if prop["type"] != p.typ {
					t.Errorf("param %q: schema type %v, want %s", p.name, prop["type"], p.typ)
				}
				if d, _ := prop["description"].(string); d == "" {
					t.Errorf("param %q has no description", p.name)
				}
				if p.required {
					required = append(required, p.name)
				}
			}
			if len(schema.Properties) != len(sp.params) {
				t.Errorf("schema has %d properties, params %d", len(schema.Properties), len(sp.params))
			}
			sort.Strings(required)
			sort.Strings(schema.Required)
			if !reflect.DeepEqual(required, schema.Required) {
				t.Errorf("required %v, schema says %v", required, schema.Required)
			}
			if d := tool.Description(); len(d) < 200 || !strings.Contains(d, "Output") {
				t.Errorf("description too thin: %q", d)
			}
			// Schema returns a copy: changing it must not change the tool.
			s := tool.Schema()
			s[0] = 'X'
			if tool.Schema()[0] == 'X' {
				t.Error("Schema returned shared memory")
			}
		})
	}
}

func TestPrepareBadArguments(t *testing.T) {
	env := Env{Cwd: t.TempDir()}
	tests := []struct {
		tool, args string
		want       []string // substrings of the error
	}{
		{"nope", `{}`, []string{`unknown tool "nope"`, "bash, read_file, write_file, edit_file"}},
		{"bash", `{"command":`, []string{"bash: the arguments are not valid JSON", `{"command": string, "timeout"?: number}`}},
		{"bash", `["ls"]`, []string{"must be a JSON object", "not array"}},
		{"bash", `{"command":"ls"} {"x":1}`, []string{"more than one JSON value"}},
		{"bash", ``, []string{`missing required argument "command" (string)`}},
		{"bash", `{"command":null}`, []string{`missing required argument "command"`}},
		{"bash", `{"command":42}`, []string{`argument "command" must be a string, got number 42`}},
		{"bash", `{"command":"  "}`, []string{`"command" is empty`}},
		{"bash", `{"command":"ls","timeout":"ten"}`, []string{`"timeout" must be a number, got string "ten"`}},
		{"bash", `{"command":"ls","timeout":0}`, []string{`"timeout" must be at least 0.001`}},
		{"bash", `{"command":"ls","cwd":"/tmp"}`, []string{`unknown argument "cwd"`}},
		{"read_file", `{}`, []string{`missing required argument "path"`}},
		{"read_file", `{"path":""}`, []string{`"path" is empty`}},
		{"read_file", `{"path":"a","offset":1.5}`, []string{`"offset" must be an integer`}},
		{"read_file", `{"path":"a","offset":0}`, []string{`"offset" must be at least 1`}},
		{"read_file", `{"path":"a","limit":-3}`, []string{`"limit" must be at least 1`}},
		{"read_file", `{"path":"a","offest":3}`, []string{`unknown argument "offest"`, `"offset"?: integer`}},
		{"write_file", `{"path":"a"}`, []string{`missing required argument "content"`}},
		{"write_file", `{"path":["a"],"content":""}`, []string{`"path" must be a string, got array ["a"]`}},
		{"edit_file", `{"path":"a","old_text":"x"}`, []string{`missing required argument "new_text"`}},
		{"edit_file", `{"path":"a","old_text":"x","new_text":"y","replace_all":"yes"}`, []string{`"replace_all" must be a boolean`}},
		{"edit_file", `{"path":"a","old_text":"x","new_text":"y"}`, []string{"does not exist; use write_file"}},
		{"edit_file", `{"path":"a","file_path":"b","old_text":"x","new_text":"y"}`, []string{`"file_path" and "path" are the same argument; give "path" only`}},
		{"read_file", `{"path":"a","offset":"ten"}`, []string{`"offset" must be an integer, got string "ten"`}},
		{"plan", `{"action":"update","index":1,"status":"done"}`, []string{`there is no entry 1`}},
		{"plan", `{"action":"set","entries":[{"content":"x","priority":"urgent"}]}`, []string{`entry 1: "priority" must be high, medium or low, got "urgent"`}},
		{"lsp", `{"action":"jump","path":"a.go"}`, []string{`"action" must be definition, references, hover, symbols or rename, got "jump"`}},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.args, func(t *testing.T) {
			c, err := Prepare(env, tt.tool, tt.args)
			if err == nil {
				t.Fatalf("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			// A known tool still gives a Call to show.
			if _, known := Lookup(tt.tool); known {
				if c == nil || c.Tool == nil || c.Kind != c.Tool.Kind() || !strings.HasPrefix(c.Title, tt.tool) {
					t.Errorf("no usable Call for a known tool: %+v", c)
				}
			} else if c != nil {
				t.Errorf("a Call for an unknown tool: %+v", c)
			}
		})
	}
}

func TestPrepareShowsTheCall(t *testing.T) {
	cwd := t.TempDir()
	mustWrite(t, filepath.Join(cwd, "a.txt"), "hello\n")
	env := Env{Cwd: cwd}
	tests := []struct {
		tool, args, title string
		locations         []string
		mutating          bool
	}{
		{"bash", `{"command":"ls -la | head"}`, "bash: ls -la | head", nil, true},
		{"bash", `{"command":"ls","timeout":null}`, "bash: ls", nil, true},
		{"read_file", `{"path":"a.txt","offset":2,"limit":null}`, "read_file: a.txt", []string{filepath.Join(cwd, "a.txt")}, false},
		{"read_file", `{"path":"sub/../a.txt"}`, "read_file: sub/../a.txt", []string{filepath.Join(cwd, "a.txt")}, false},
		{"read_file", `{"path":"/etc/hosts"}`, "read_file: /etc/hosts", []string{"/etc/hosts"}, false},
		{"write_file", `{"path":"new/b.txt","content":"b"}`, "write_file: new/b.txt", []string{filepath.Join(cwd, "new", "b.txt")}, true},
		{"edit_file", `{"path":"a.txt","old_text":"hello","new_text":"bye"}`, "edit_file: a.txt", []string{filepath.Join(cwd, "a.txt")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.title, func(t *testing.T) {
			c, err := Prepare(env, tt.tool, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if c.Title != tt.title || c.Mutating != tt.mutating || !reflect.DeepEqual(c.Locations, tt.locations) {
				t.Errorf("got title %q mutating %v locations %v", c.Title, c.Mutating, c.Locations)
			}
			if c.Args == nil {
				t.Error("no Args for rawInput")
			}
		})
	}
}

func TestRunRejectsBadCalls(t *testing.T) {
	ctx := context.Background()
	env := Env{Cwd: t.TempDir()}
	if r := Run(ctx, env, nil); !r.Failed {
		t.Error("nil call did not fail")
	}
	if r := Run(ctx, env, &Call{}); !r.Failed {
		t.Error("call without tool did not fail")
	}
	// A Call built by hand is validated again before it runs.
	r := Run(ctx, env, &Call{Tool: bashTool{}, Args: map[string]any{"command": 3.0}})
	if !r.Failed || !strings.Contains(r.Output, `"command" must be a string`) {
		t.Errorf("hand-built bad call: %+v", r)
	}
	// A tool from elsewhere cannot be run by this package.
	r = Run(ctx, env, &Call{Tool: foreignTool{}})
	if !r.Failed || !strings.Contains(r.Output, "not a built-in tool") {
		t.Errorf("foreign tool: %+v", r)
	}
	// A cancelled context runs nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	c, err := Prepare(env, "write_file", `{"path":"x.txt","content":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	if r := Run(cctx, env, c); !r.Failed || r.Output != "[cancelled]" {
		t.Errorf("cancelled run: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(env.Cwd, "x.txt")); err == nil {
		t.Error("a cancelled write_file wrote the file")
	}
}

type foreignTool struct{}

func (foreignTool) Name() string            { return "foreign" }
func (foreignTool) Description() string     { return "" }
func (foreignTool) Schema() json.RawMessage { return json.RawMessage(`{}`) }
func (foreignTool) Kind() Kind              { return KindOther }

// panicTool is a built-in tool that panics when it runs: the test hook
// for Run's recovery.
type panicTool struct{ foreignTool }

var noArgsSpec = specFor[struct{}]("foreign")

func (panicTool) spec() *spec                    { return noArgsSpec }
func (panicTool) prepare(env Env, c *Call) error { return nil }
func (panicTool) run(ctx context.Context, env Env, c *Call) Result {
	var m map[string]int
	m["boom"]++ // a nil-map write, a real runtime panic
	return Result{}
}

func TestRunRecoversPanics(t *testing.T) {
	r := Run(context.Background(), Env{Cwd: t.TempDir()}, &Call{Tool: panicTool{}})
	if !r.Failed || !strings.Contains(r.Output, "internal error: foreign panicked: assignment to entry in nil map") {
		t.Errorf("panic result: %+v", r)
	}
}

// hugeTool returns more than any tool should, to test Run's safety net.
type hugeTool struct{ panicTool }

func (hugeTool) run(ctx context.Context, env Env, c *Call) Result {
	return Result{Output: strings.Repeat("z", 2*MaxOutputBytes)}
}

func TestRunCapsEveryOutput(t *testing.T) {
	dir := t.TempDir()
	r := Run(context.Background(), Env{Output: Output{Budget: 8192, Dir: dir, Name: "call_1.out"}}, &Call{Tool: hugeTool{}})
	if len(r.Output) > 8192 || !strings.HasPrefix(r.Output, "zzz") || !strings.Contains(r.Output, "the whole output is in "+filepath.Join(dir, "call_1.out")) {
		t.Errorf("got %d bytes: %.100q…", len(r.Output), r.Output)
	}
	if got := truncateHead("ab✓", 3); got != "ab\n[output truncated: 3 more bytes]" {
		t.Errorf("truncateHead cut a character: %q", got)
	}
}

// TestFetchContentSaveNamesTheFile: a save asks like a write, so what the
// user approves names the file, whether it is new or replaced, and a
// directory is refused before anyone is asked.
func TestFetchContentSaveNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	env := Env{Cwd: dir}
	if err := os.WriteFile(filepath.Join(dir, "old.md"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ output, title, effect string }{
		{"", "fetch_content: https://x.test/a", ""},
		{"new.md", "fetch_content: https://x.test/a → new.md", "Saves https://x.test/a to " + filepath.Join(dir, "new.md") + " (a new file)."},
		{"old.md", "fetch_content: https://x.test/a → old.md", "Saves https://x.test/a to " + filepath.Join(dir, "old.md") + " (replaces the existing file of 5 bytes)."},
	} {
		args := fmt.Sprintf(`{"url":"https://x.test/a","output":%q}`, tt.output)
		c, err := Prepare(env, "fetch_content", args)
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		if c.Title != tt.title || c.Effect != tt.effect || c.Mutating != (tt.output != "") {
			t.Errorf("%s: title %q, effect %q, mutating %v", args, c.Title, c.Effect, c.Mutating)
		}
	}
	if _, err := Prepare(env, "fetch_content", `{"url":"https://x.test/a","output":"."}`); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory as output: %v", err)
	}
}

// TestArgumentsModelsSend: the names other agents' tools use and numbers
// or booleans written as strings are taken as the schema's own; what the
// tool receives is the same as for the canonical call.
func TestArgumentsModelsSend(t *testing.T) {
	cwd := t.TempDir()
	mustWrite(t, filepath.Join(cwd, "a.txt"), "one\ntwo\nthree\n")
	env := Env{Cwd: cwd}
	tests := []struct {
		tool, args string
		want       map[string]any // the arguments as the call holds them
	}{
		{"edit_file", `{"file_path":"a.txt","old_string":"two","new_string":"2"}`,
			map[string]any{"path": "a.txt", "old_text": "two", "new_text": "2"}},
		{"edit_file", `{"filePath":"a.txt","oldString":"two","newString":"2","replaceAll":"true"}`,
			map[string]any{"path": "a.txt", "old_text": "two", "new_text": "2", "replace_all": true}},
		{"read_file", `{"path":"a.txt","offset":"2","limit":" 1 "}`, map[string]any{"path": "a.txt", "offset": 2.0, "limit": 1.0}},
		{"read_file", `{"file_path":"a.txt","limit":null}`, map[string]any{"path": "a.txt"}},
		{"read_file", `{"path":"a.txt","limit":1e300}`, map[string]any{"path": "a.txt", "limit": float64(maxInteger)}},
		{"bash", `{"cmd":"echo hi","timeout":"30"}`, map[string]any{"command": "echo hi", "timeout": 30.0}},
		{"write_file", `{"file_path":"b.txt","contents":"x"}`, map[string]any{"path": "b.txt", "content": "x"}},
		{"plan", `{"action":"update","index":"1","status":"completed"}`, map[string]any{"action": "update", "index": 1.0, "status": "completed"}},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.args, func(t *testing.T) {
			env := env
			env.Plan = []history.PlanEntry{{Content: "x", Priority: "medium", Status: "pending"}}
			c, err := Prepare(env, tt.tool, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Args, tt.want) {
				t.Errorf("args %v, want %v", c.Args, tt.want)
			}
		})
	}
	// The struct the tool reads holds them.
	c, err := Prepare(env, "read_file", `{"filePath":"a.txt","offset":"2","limit":"1"}`)
	if err != nil {
		t.Fatal(err)
	}
	if a := argsOf[readFileArgs](c); a.Path != "a.txt" || a.Offset != 2 || a.Limit != 1 {
		t.Errorf("read_file reads %+v", a)
	}
	if r := Run(context.Background(), env, c); r.Failed || !strings.Contains(r.Output, "two") || strings.Contains(r.Output, "three") {
		t.Errorf("read_file with string numbers: %+v", r)
	}
}

// TestSchemaHasTheLastWord: what the tool's own checks let through is
// still checked against the schema, with jsonschema-go, and worded with
// where it is.
func TestSchemaHasTheLastWord(t *testing.T) {
	_, err := Prepare(Env{Cwd: t.TempDir()}, "ask_user", `{"questions":[{"question":"Which?","type":"text","options":["a",3]}]}`)
	if err == nil || !strings.Contains(err.Error(), `"options" must be a list of non-empty strings`) {
		t.Errorf("a bad option: %v", err)
	}
	if got := schemaError(askUserSpec.resolved.Validate(map[string]any{"questions": []any{map[string]any{"question": "q", "type": "odd"}}})); !strings.Contains(got, "questions[].type:") || !strings.Contains(got, "odd") {
		t.Errorf("schemaError = %q", got)
	}
}
