package actors

import (
	"context"
	"errors"
	"fmt"
	"os/exec"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/agents"
	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/hooks"
	"github.com/mm-agent/mm/prompt"
	"github.com/mm-agent/mm/tools"
)

// Client is the part of the client a tool worker asks: permission before
// mutating anything, questions for ask_user. The ACP edge implements it.
type Client interface {
	RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error)
	// Forms says the client of the session announced elicitation.form.
	Forms(sessionID string) bool
	// Caps are the session capabilities the client of the session
	// announced at initialize (clientCapabilities.session).
	Caps(sessionID string) Caps
	// Elicit asks the client's user a form (elicitation/create) and waits
	// for the answer; an error means no one could be asked, except one
	// wrapping ErrAnswerTooLarge: the answer came, too large to read.
	Elicit(ctx context.Context, e Elicitation) (ElicitationResult, error)
	// ElicitURL asks the client's user to open a URL (elicitation/create
	// in URL mode) and returns what they did: accept, decline or cancel.
	// Only for a client with CapElicitURL.
	ElicitURL(ctx context.Context, e URLElicitation) (string, error)
}

// Caps are the session capabilities a client announces at initialize
// (clientCapabilities.session, ACP schema 1.21): what mm may send it
// beyond the seed's updates.
type Caps uint32

const (
	// CapNotices: notice updates (session.notices).
	CapNotices Caps = 1 << iota
	// CapCompaction: compaction_update and compaction_summary_chunk
	// (session.compaction).
	CapCompaction
	// CapBoolOptions: boolean session config options
	// (session.configOptions.boolean).
	CapBoolOptions
	// CapElicitURL: elicitation in URL mode (elicitation.url), through
	// which an MCP server's request that the user open a page (a sign-in)
	// reaches the user.
	CapElicitURL
)

// Has says whether c holds every capability of x.
func (c Caps) Has(x Caps) bool { return c&x == x }

// ErrAnswerTooLarge is what a Client's Elicit wraps when the answer is
// larger than any form of mm's may need: it was not read. For ask_user the
// editor's answers do not fit the questions, as an answer of the wrong
// type does not.
var ErrAnswerTooLarge = errors.New("the form's answer is too large to read")

// Elicitation is a form to show for a tool call of a session.
type Elicitation struct {
	SessionID, ToolCallID, Message string
	// Schema is the requested schema (tools.FormSchema).
	Schema map[string]any
}

// URLElicitation is a page an MCP server asks the user to open during a
// tool call of a session (MCP's URL mode elicitation: a sign-in, a
// consent), as the client is asked to show it.
type URLElicitation struct {
	SessionID, ToolCallID string
	// ElicitationID names it to the client: its server's name and the
	// server's own id.
	ElicitationID string
	URL, Message  string
}

// ElicitationResult is the user's answer: Action is accept, decline or
// cancel; Content holds the accepted values by property name.
type ElicitationResult struct {
	Action  string
	Content map[string]any
}

// toolWorker runs one tool call. Its goroutine prepares the call (which may
// read the file an edit changes), reports it, waits for the session's go
// ahead (sent once the pending tool_call is written), asks permission when
// the policy says so, runs the tool and reports the result. Stopping the
// actor cancels the goroutine's context: a bash command dies with its whole
// process group, a permission request is abandoned.
type toolWorker struct {
	rt *Runtime
	// client is the client of the session's connection when the call
	// started: its permission requests and forms go there.
	client  Client
	session string
	turn    uint64
	callID  string
	name    string
	args    string
	env     tools.Env
	// hookConfine confines the call's hooks (session.hookConfine); nil:
	// they run as they are.
	hookConfine func(*exec.Cmd) (func(), error)
	policy      toolPolicy
	// repeat is how many times in a row this turn has called the tool
	// with these arguments, this call included.
	repeat int
	// agents are the session's asked agents (ask_agent).
	agents *agents.Pool
	// nested finds the instructions of the subfolders the call touches
	// (system.go); nil: none looked for.
	nested *nestedLookup
	// budget is the session's stream budget: a live view of a command's
	// output is shown only when it fits, so a client that stops reading
	// gets fewer views, not more memory held for it.
	budget  *Budget
	cancel  context.CancelFunc
	proceed chan struct{}
}

// toolPolicy is the session's permission state for this call's tool, copied
// when the worker is spawned (calls of a turn run one at a time, so it
// cannot change while the worker runs).
type toolPolicy struct {
	yolo   bool
	always bool // the user answered allow_always for this tool
	never  bool // the user answered never for this tool
}

// Messages from a worker to its session. Each worker's goroutine sends
// exactly one toolFinished, whatever happens, so the session knows when the
// worker's work is over.
type toolPrepared struct {
	Turn      uint64
	CallID    string
	Name      string // the tool's, as the model called it
	Title     string
	Kind      acp.ToolKind
	RawInput  map[string]any
	Locations []string
	Err       string // the call is bad; the worker sends toolFinished next
}

type toolStarted struct {
	Turn   uint64
	CallID string
}

// toolProgress is a running command's output so far; Cost was taken from
// the session's budget.
type toolProgress struct {
	Turn   uint64
	CallID string
	Output string
	Cost   int
}

// toolAsking says the worker is about to ask the user; the session gives
// the turn's slot back meanwhile.
type toolAsking struct {
	Turn   uint64
	CallID string
}

// toolAnswered says the user has answered; the worker waits for a
// toolProceed, sent once the turn has its slot again.
type toolAnswered struct {
	Turn   uint64
	CallID string
}

// toolRemember records an allow_always or never answer for a tool name.
type toolRemember struct {
	Tool  string
	Allow bool
}

type toolFinished struct {
	Turn   uint64
	CallID string
	Tool   string
	Output string
	Failed bool
	Ran    bool // the tool ran (it was not refused and its arguments were valid)
	Denied bool // a preToolCall hook denied it
	// Plan, when not nil, is the session's plan as a plan call left it.
	Plan []history.PlanEntry
	// Media are images and resources the tool returned.
	Media []tools.Media
	// Edits are the files a rename changed.
	Edits    []tools.Diff
	OldText  *string
	NewText  string
	DiffPath string
	// Instructions are the instruction files of the subfolders the call
	// touched that the model has not seen (system.go).
	Instructions []prompt.File
}

// toolProceed is the session's go-ahead: delivered after the pending
// tool_call notification is written, and again once the turn has its slot
// back after the user answered.
type toolProceed struct{}

func (w *toolWorker) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		var c context.Context
		c, w.cancel = context.WithCancel(context.Background())
		w.proceed = make(chan struct{}, 1)
		root, parent := ctx.ActorSystem().Root, ctx.Parent()
		w.rt.goWork(func() { w.work(c, root, parent) })
	case *toolProceed:
		select {
		case w.proceed <- struct{}{}:
		default:
		}
	case *actor.Stopping:
		if w.cancel != nil {
			w.cancel()
		}
	}
}

func (w *toolWorker) work(ctx context.Context, root *actor.RootContext, parent *actor.PID) {
	fin := &toolFinished{Turn: w.turn, CallID: w.callID, Tool: w.name, Failed: true}
	defer func() {
		if r := recover(); r != nil {
			fin.Output = fmt.Sprintf("[internal error: %s panicked: %v]", w.name, r)
			fin.Failed = true
		}
		root.Send(parent, fin)
	}()
	penv := w.env
	penv.Ctx = ctx // a prepare may wait on a server (an lsp rename)
	call, err := tools.Prepare(penv, w.name, w.args)
	prep := &toolPrepared{Turn: w.turn, CallID: w.callID, Name: w.name, Title: w.name, Kind: acp.ToolKindExecute}
	if call != nil {
		prep.Title, prep.Kind, prep.RawInput, prep.Locations = call.Title, toolKind(call.Kind), call.Args, call.Locations
	}
	if prep.RawInput == nil {
		prep.RawInput = history.RawArgs(w.args)
	}
	if err != nil {
		prep.Err = err.Error()
		fin.Output = "[error: " + err.Error() + "]"
		root.Send(parent, prep)
		return
	}
	root.Send(parent, prep)
	if !w.wait(ctx) {
		fin.Output = "[cancelled]"
		return
	}
	if max := w.rt.cfg.Turns.MaxRepeats; w.repeat > max {
		// Local models loop: the same call would give the same result.
		fin.Output = fmt.Sprintf("[not run: this is call %d in a row to %s with the same arguments, and it would return what the last %d returned. Use that result, or try something else.]", w.repeat, w.name, max)
		return
	}
	if denied, reason := w.rt.hooks.PreToolCall(ctx, hooks.PreToolCallEvent{
		SessionID: w.session, Cwd: w.env.Cwd, Tool: w.name, Input: call.Args, Confine: w.hookConfine,
	}); denied {
		fin.Output, fin.Denied = "[denied by a hook: "+reason+"]", true
		return
	}
	if ok, reason := w.allowed(ctx, root, parent, call); !ok {
		fin.Output = reason
		return
	}
	env := w.env
	env.Started = func() { root.Send(parent, &toolStarted{Turn: w.turn, CallID: w.callID}) }
	env.Progress = func(output string) {
		if n := cost(output); w.budget.tryTake(n) {
			root.Send(parent, &toolProgress{Turn: w.turn, CallID: w.callID, Output: output, Cost: n})
		}
	}
	env.Ask = func(ctx context.Context, qs []tools.Question) tools.Answers { return w.ask(ctx, root, parent, qs) }
	ctx = w.askURLs(ctx, root, parent)
	env.AskAgent = func(ctx context.Context, agent, question string) (string, error) {
		return w.askAgent(ctx, root, parent, agent, question)
	}
	res := w.rt.runTool(ctx, env, call)
	fin.Instructions = w.nested.find(ctx, append(call.Locations[:len(call.Locations):len(call.Locations)], call.Named...))
	fin.Ran = true
	fin.Output, fin.Failed, fin.Plan, fin.Media, fin.Edits = res.Output, res.Failed, res.Plan, res.Media, res.Edits
	if res.Diff != nil {
		fin.DiffPath, fin.OldText, fin.NewText = res.Diff.Path, res.Diff.OldText, res.Diff.NewText
	}
}

// person runs ask, which waits for a person, without holding the turn's
// slot: a person answers at their own pace, and another session's turn may
// use the slot meanwhile. It returns once the slot is back, false when the
// turn was cancelled.
func (w *toolWorker) person(ctx context.Context, root *actor.RootContext, parent *actor.PID, ask func()) bool {
	root.Send(parent, &toolAsking{Turn: w.turn, CallID: w.callID})
	ask()
	root.Send(parent, &toolAnswered{Turn: w.turn, CallID: w.callID})
	return w.wait(ctx)
}

// wait waits for the session's go-ahead; false means cancelled.
func (w *toolWorker) wait(ctx context.Context) bool {
	select {
	case <-w.proceed:
		return true
	case <-ctx.Done():
		return false
	}
}

// allowed applies the permission policy, asking the client when it must.
// A refusal returns the text the model reads.
func (w *toolWorker) allowed(ctx context.Context, root *actor.RootContext, parent *actor.PID, call *tools.Call) (bool, string) {
	refused := "[" + w.name + " rejected by the user]"
	if w.name == "bash" {
		refused = "[command rejected by the user]"
	}
	sensitive, _ := call.AlwaysAsk(w.rt.sensitive, w.env.Cwd)
	switch {
	case sensitive:
		// Sensitive paths ask every time: allow_always does not cover them.
	case w.policy.never:
		return false, refused
	case !call.Mutating, w.policy.yolo, w.policy.always:
		return true, ""
	}
	req := acp.RequestPermissionRequest{
		SessionId: acp.SessionId(w.session),
		ToolCall: acp.ToolCallUpdate{
			ToolCallId: acp.ToolCallId(w.callID),
			Title:      acp.Ptr(call.Title),
			Kind:       acp.Ptr(toolKind(call.Kind)),
			Status:     acp.Ptr(acp.ToolCallStatusPending),
			RawInput:   call.Args,
			Locations:  locations(call.Locations),
		},
		Options: permissionOptions,
	}
	if call.Effect != "" {
		req.ToolCall.Content = []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(call.Effect))}
	}
	if d := call.Proposal; d != nil {
		req.ToolCall.Content = append(req.ToolCall.Content, diffContent(d.Path, d.OldText, d.NewText))
	}
	for _, d := range call.Edits {
		req.ToolCall.Content = append(req.ToolCall.Content, diffContent(d.Path, d.OldText, d.NewText))
	}
	var resp acp.RequestPermissionResponse
	var err error
	if !w.person(ctx, root, parent, func() { resp, err = w.client.RequestPermission(ctx, req) }) {
		return false, "[cancelled]"
	}
	if err != nil || resp.Outcome.Selected == nil {
		// A transport error or a cancelled outcome is a refusal.
		return false, refused
	}
	switch resp.Outcome.Selected.OptionId {
	case "allow":
		return true, ""
	case "allow_always":
		root.Send(parent, &toolRemember{Tool: w.name, Allow: true})
		return true, ""
	case "never":
		root.Send(parent, &toolRemember{Tool: w.name, Allow: false})
	}
	return false, refused
}

var permissionOptions = []acp.PermissionOption{
	{OptionId: "allow", Name: "Allow", Kind: acp.PermissionOptionKindAllowOnce},
	{OptionId: "allow_always", Name: "Always allow", Kind: acp.PermissionOptionKindAllowAlways},
	{OptionId: "reject", Name: "Reject", Kind: acp.PermissionOptionKindRejectOnce},
	{OptionId: "never", Name: "Never", Kind: acp.PermissionOptionKindRejectAlways},
}

// toolKind maps a tool's kind to ACP's; an unknown kind shows as execute.
func toolKind(k tools.Kind) acp.ToolKind {
	switch k {
	case tools.KindRead:
		return acp.ToolKindRead
	case tools.KindEdit:
		return acp.ToolKindEdit
	case tools.KindFetch:
		return acp.ToolKindFetch
	case tools.KindOther:
		return acp.ToolKindOther
	}
	return acp.ToolKindExecute
}

func locations(paths []string) []acp.ToolCallLocation {
	if len(paths) == 0 {
		return nil
	}
	out := make([]acp.ToolCallLocation, len(paths))
	for i, p := range paths {
		out[i] = acp.ToolCallLocation{Path: p}
	}
	return out
}

func diffContent(path string, oldText *string, newText string) acp.ToolCallContent {
	return acp.ToolCallContent{Diff: &acp.ToolCallContentDiff{Path: path, OldText: oldText, NewText: newText}}
}
