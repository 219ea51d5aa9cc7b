package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/tools/fetch"
	"github.com/mm-agent/mm/tools/skills"
)

// Kind is the ACP tool kind string: "execute", "read", "edit", "fetch" or
// "other". It is a plain string so that the caller maps it to ACP without
// this package importing the SDK.
type Kind string

// The tool kinds of the seed's table. An unknown kind is shown as execute.
const (
	KindExecute Kind = "execute"
	KindRead    Kind = "read"
	KindEdit    Kind = "edit"
	KindFetch   Kind = "fetch"
	KindOther   Kind = "other"
)

// MaxOutputBytes is the most that any tool output given to the model may
// hold, whatever its window: the bound of tools.output.maxBytes. Each
// call's own budget (Env.Output) is usually far less.
const MaxOutputBytes = 256 << 10

// DefaultBashTimeout is the per-command limit used when Env.BashTimeout is
// zero; it is the default of the tools.bash.timeout setting.
const DefaultBashTimeout = 10 * time.Minute

// Env is what a call runs against.
type Env struct {
	// Cwd is the session's absolute working directory. Relative paths in
	// tool arguments resolve against it, and bash runs in it.
	Cwd string
	// Offered, when not nil, are the names of the built-in tools offered
	// to the model (Offered): a call to another one is an unknown tool.
	// nil offers every built-in.
	Offered []string
	// Output sizes the call's result to the model's window and says where
	// a cut output is kept whole (budget.go).
	Output Output
	// Roots, when set, are the only folders mm's own file tools (read_file,
	// write_file, edit_file, fetch_content's output, lsp) may open, links
	// followed (mm serve's serve.roots); a path outside is a result the
	// model reads. bash is not confined by them.
	Roots []string
	// BashTimeout is the default per-command limit of bash, used when the
	// call gives no timeout of its own. Zero means DefaultBashTimeout.
	BashTimeout time.Duration
	// SessionID marks the processes bash starts (procs.SessionEnv), so
	// that what they leave running dies with the session.
	SessionID string
	// Plan is the session's plan when the call is prepared (calls of a
	// turn run one at a time, so it cannot change meanwhile).
	Plan []history.PlanEntry
	// Ask asks the user ask_user's questions; nil when no one can be
	// asked.
	Ask Asker
	// SkillDirs are the session's skill folders, absolute (read_skill).
	SkillDirs []string
	// AskAgent asks a configured agent (ask_agent); nil when none can be
	// asked.
	AskAgent AgentAsker
	// MCP are the session's MCP servers; nil when it has none.
	MCP MCP
	// LSP are the session's language servers; nil when none is
	// configured.
	LSP LSP
	// Sandbox is the session's sandbox policy, which mm's own file tools
	// obey as its commands do (roots.go); the zero policy confines nothing.
	Sandbox sandbox.Policy
	// Foreign, when set, lists the folders other tokens own on a shared
	// server (folders have owners): mm's own file tools refuse a path in
	// one, whatever the sandbox, as the session's commands see them
	// empty. It may wait for the store, and is asked each time a call is
	// checked; its error refuses the call.
	Foreign func() ([]string, error)
	// Confine, when set, makes a command a tool starts for the session (bash)
	// run in the session's sandbox (package sandbox); an error is why it
	// cannot, and the command does not run.
	Confine func(cmd *exec.Cmd) (started func(), err error)
	// Ctx is the call's context, for a prepare that must wait on a server
	// (an lsp rename computes its edits); nil means not cancellable.
	Ctx context.Context
	// HTTP is the client fetch_content uses (shared, so its connections
	// are kept alive between calls), and Fetch its limits.
	HTTP  *http.Client
	Fetch fetch.Limits
	// Started, if set, is called once the call is actually running: for
	// bash, once its process exists (under load, starting a process can
	// take milliseconds; "running" means it can be killed). It is called at
	// most once, from Run's goroutine.
	Started func()
	// Progress, if set, shows a running bash command's output so far
	// (the last LiveOutputBytes, at most every LiveOutputEvery); it is not
	// called once Run has returned.
	Progress func(output string)
}

func (e Env) started() {
	if e.Started != nil {
		e.Started()
	}
}

// Call is a parsed tool call, ready to show and to run.
type Call struct {
	Tool Tool
	// Args are the decoded arguments, what ACP shows as rawInput. Run reads
	// its arguments from here, so a Call built by hand (a replay) runs too.
	Args map[string]any
	// Title is "bash: <command>", "read_file: <path>", "write_file: <path>"
	// or "edit_file: <path>", with the path as the model gave it.
	Title string
	Kind  Kind
	// Locations are the absolute, cleaned paths the call touches; empty
	// for bash, whose effects cannot be known before it runs.
	Locations []string
	// Named are, for bash, the absolute paths its command line names
	// (shellwords.go): checked against tools.sensitive, never shown.
	Named []string
	// Ask, when set, says why the call asks the user every time, in yolo
	// mode too (an MCP server configured with permissions: ask).
	Ask string
	// Mutating says the call changes something, so it needs permission
	// when yolo is off (bash, write_file, edit_file).
	Mutating bool
	// Effect, when set, says in one line what the call will change where
	// no diff can show it before it runs (fetch_content's output: the
	// file written and whether it replaces one), for the permission
	// request to show next to the title.
	Effect string
	// Proposal is set for write_file and edit_file: the edit the user
	// approves, computed from the file as it is when Prepare runs. OldText
	// is nil for a file that does not exist yet.
	Proposal *Diff
	// Edits are the files an lsp rename changes, each as a whole-file
	// diff, for the user to approve.
	Edits []Diff
	// lspText is what a rename's server said it did.
	lspText string
	// Questions are an ask_user call's questions, validated by prepare.
	Questions []Question
	// params are the arguments as the tool's struct (argsOf).
	params any
	// edit is the change an edit_file call makes, as prepare computed it
	// (the Proposal the user approves).
	edit *edit
	// plan is the plan a plan call makes, computed by prepare.
	plan []history.PlanEntry
	// skill is the skill a read_skill call reads.
	skill *skills.Skill
}

// Diff is a whole-file change, the ACP diff content: OldText nil means the
// file is new.
type Diff struct {
	Path    string
	OldText *string
	NewText string
}

// Result is what the model reads and what the editor shows.
type Result struct {
	// Output is the text for the model, also ACP's rawOutput.output. A
	// failure is explained here; it is never a Go error.
	Output string
	// Failed says the tool could not do its job: bad arguments, a missing
	// file, a timeout, a cancel. A bash command that exits non-zero is not
	// a failure: the command ran, and its exit code is in Output.
	Failed bool
	// Diff is the change made by a completed write_file or edit_file.
	Diff *Diff
	// Edits are the changes of a completed rename (lsp).
	Edits []Diff
	// Plan, when not nil, is the session's plan as a plan call left it
	// (empty once cleared).
	Plan []history.PlanEntry
	// Media are images and resources an MCP tool returned, for the editor.
	Media []Media
}

// Media is an image or a resource a tool returned: Data is base64 (an
// image, or a binary resource), Text a text resource.
type Media struct {
	Type     string // "image" or "resource"
	MIMEType string
	Data     string
	URI      string
	Text     string
}

// Tool describes one tool to the model and to the editor.
type Tool interface {
	Name() string
	// Description is what the model reads: the embedded .md file beside
	// the tool's code.
	Description() string
	// Schema is the JSON schema of the arguments object. Each call returns
	// a fresh copy, so a caller may keep or change it.
	Schema() json.RawMessage
	Kind() Kind
}

// builtin is what Prepare and Run need beyond the public Tool interface.
// It is unexported so that only this package's tools (and its tests) can be
// prepared and run.
type builtin interface {
	Tool
	// spec is the tool's parameters, from its struct (args.go): the
	// schema, the checks and the errors.
	spec() *spec
	// prepare fills the call's Title, Locations, Mutating and Proposal
	// from its arguments (argsOf), which have already been checked at the
	// top level. It returns an error worded for the model when the call
	// cannot go ahead.
	prepare(env Env, c *Call) error
	// run executes the call. It may assume c.Args passed validation.
	run(ctx context.Context, env Env, c *Call) Result
}

// Builtin returns the built-in tools in the order they are offered to the
// model. Each call returns a new slice.
func Builtin() []Tool {
	return []Tool{bashTool{}, readFileTool{}, writeFileTool{}, editFileTool{}, readSkillTool{}, planTool{}, askUserTool{}, askAgentTool{}, fetchContentTool{}, lspTool{}}
}

// Has says what a session has that some tools need to work.
type Has struct {
	// Agents: agents are configured for ask_agent.
	Agents bool
	// LSP: language servers are configured for lsp.
	LSP bool
	// Skills: the session's catalog holds at least one skill (read_skill).
	Skills bool
}

// Offered returns the built-in tools that can work in a session that has
// has, in the order of Builtin: ask_agent only with agents configured, lsp
// only with language servers, read_skill only with skills. A tool that
// cannot work is not offered, so that the model neither reads its
// description on every request nor calls it to learn that it fails.
func Offered(has Has) []Tool {
	out := Builtin()[:0:0]
	for _, t := range Builtin() {
		switch t.Name() {
		case "ask_agent":
			if !has.Agents {
				continue
			}
		case "lsp":
			if !has.LSP {
				continue
			}
		case "read_skill":
			if !has.Skills {
				continue
			}
		}
		out = append(out, t)
	}
	return out
}

// Lookup returns the built-in tool with the given name.
func Lookup(name string) (Tool, bool) {
	for _, t := range Builtin() {
		if t.Name() == name {
			return t, true
		}
	}
	return nil, false
}

// Prepare parses and validates a model's call, given the raw JSON text of
// its arguments, for display and permission, without running it. An empty
// argument text counts as {}.
//
// A bad call (unknown tool, invalid JSON, a missing required argument, a
// wrong type, an edit whose old_text is not in the file) returns an error
// whose text is fit for the model. When the tool is known, the Call is
// returned even with an error, with its Tool, Kind, Title and whatever Args
// could be decoded, so that the caller can still show the failed call.
func Prepare(env Env, name, rawArgs string) (*Call, error) {
	if strings.HasPrefix(name, MCPPrefix) {
		return prepareMCP(env, name, rawArgs)
	}
	t, ok := Lookup(name)
	if !ok || (env.Offered != nil && !slices.Contains(env.Offered, name)) {
		names := env.Offered
		if names == nil {
			for _, b := range Builtin() {
				names = append(names, b.Name())
			}
		}
		return nil, fmt.Errorf("unknown tool %q; the available tools are: %s", name, strings.Join(names, ", "))
	}
	b := t.(builtin)
	c := &Call{Tool: t, Title: name, Kind: t.Kind()}
	sp := b.spec()
	args, err := decodeArgs(sp, rawArgs)
	c.Args = args
	if err != nil {
		return c, err
	}
	c.params = sp.decodeInto(args)
	if err := b.prepare(env, c); err != nil {
		return c, err
	}
	// The tool's own checks word the common mistakes best; the schema
	// has the last word on the rest.
	if err := sp.validate(args); err != nil {
		return c, err
	}
	if err := env.confine(c); err != nil {
		return c, err
	}
	return c, nil
}

// Run executes a prepared call and blocks until it is done. It returns
// promptly once ctx is cancelled, with the output so far and "[cancelled]".
// It never panics: a panic inside a tool becomes a failed Result.
func Run(ctx context.Context, env Env, c *Call) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			name := "tool"
			if c != nil && c.Tool != nil {
				name = c.Tool.Name()
			}
			res = Result{
				Output: truncateHead(fmt.Sprintf("[internal error: %s panicked: %v]", name, p), MaxOutputBytes),
				Failed: true,
			}
		}
	}()
	if c == nil || c.Tool == nil {
		return Result{Output: "[internal error: no tool call to run]", Failed: true}
	}
	if _, ok := c.Tool.(mcpTool); ok {
		env.started()
		return runMCP(ctx, env, c)
	}
	b, ok := c.Tool.(builtin)
	if !ok {
		return Result{Output: fmt.Sprintf("[internal error: %s is not a built-in tool]", c.Tool.Name()), Failed: true}
	}
	// The arguments are checked again because a Call may have been built
	// by hand rather than by Prepare; a tool's run relies on them.
	sp := b.spec()
	if err := sp.checkArgs(c.Args); err != nil {
		return Result{Output: err.Error(), Failed: true}
	}
	if err := sp.validate(c.Args); err != nil {
		return Result{Output: err.Error(), Failed: true}
	}
	if c.params == nil {
		c.params = sp.decodeInto(c.Args)
	}
	if ctx.Err() != nil {
		return Result{Output: "[cancelled]", Failed: true}
	}
	// Again, just before it opens them: a link may have changed since.
	if err := env.confine(c); err != nil {
		return Result{Output: err.Error(), Failed: true}
	}
	if _, ok := b.(bashTool); !ok {
		env.started()
	}
	res = b.run(ctx, env, c)
	// Each tool keeps its output within its budget plus its own lines
	// (an exit code, a heading); this net catches whatever does not (a
	// bug, a tool that forgot), so that no output can flood the model's
	// context.
	if len(res.Output) > env.Output.budget()+outputSlack {
		res.Output = env.Output.fit(res.Output, documentHead)
	}
	return res
}

// outputSlack is the room left above the budget for the lines that tools
// add to an output already cut to it.
const outputSlack = 1024
