package actors

import (
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/store"
)

// session is the actor of one ACP session. Only its Receive touches its
// fields; everything else reaches it by message.
type session struct {
	rt      *Runtime
	id      string
	cwd     string
	created time.Time
	prov    store.Provenance
	// mode is "ask" (permission before mutating tools) or "yolo".
	mode string
	// modelID selects the model among the runtime's ("default" first).
	modelID string
	// writer persists the session file; nil when sessions are not enabled.
	writer *store.Writer
	// held is a finished turn's reply waiting for its session file to be
	// written: the client hears end_turn only once the turn is on disk.
	held *heldReply
	// keep is a conversation /new set aside, written before the next save.
	keep *keepJob
	// model is the actor that runs this session's model calls (model.go);
	// nil until the first call and after a cancel poisoned it.
	model *actor.PID

	history []llm.Message
	usage   usageTotals
	// lastUsed is the context the model last reported using (input+output
	// tokens of its last call), 0 when forgotten.
	lastUsed int

	// cancelUpTo is the highest prompt sequence a cancel has covered; a
	// prompt that arrives with a sequence at or below it was cancelled
	// before it got here.
	cancelUpTo uint64
	cur        *turn
	queue      []*turn
	// closing is set once the actor is stopping.
	closing bool
	// announced is set once available_commands_update has been queued.
	announced bool
	// allowAlways and never hold the remembered permission answers, by
	// tool name. They survive /new.
	allowAlways, never map[string]bool
}

type turnState uint8

const (
	turnQueued  turnState = iota // waiting behind the session's current turn
	turnWaiting                  // waiting for a slot from the serializer
	turnRunning                  // holding a slot
)

// turn is the state of one prompt while it runs.
type turn struct {
	id      uint64 // process-wide, for the serializer
	seq     uint64 // the prompt's sequence in its session
	text    string
	replyTo *actor.PID
	out     *Reply // set instead of replyTo by Session.Start
	state   turnState
	slash   bool // /new or /compact
	// compact marks a /compact turn; auto marks a compression that runs
	// before the turn's first model call. cut and started belong to the
	// compression in flight.
	compact, auto bool
	cut           int
	started       time.Time

	histStart int // len(history) before the user message was appended
	calls     int // model calls made
	// live holds the model and tool actors whose goroutine has not yet
	// sent its final message ("model", or the tool's ACP call id). A
	// cancelled turn ends when it is empty: nothing it started is left.
	live      map[string]*actor.PID
	answer    strings.Builder // text of the current model call
	cancelled bool
	// pending are the tool calls of the last model answer not yet run;
	// tool is the one running.
	pending []llm.ToolCall
	tool    llm.ToolCall
	// What the running call's tool_call showed, kept with its result.
	toolTitle string
	toolKind  acp.ToolKind
	toolInput map[string]any

	commands, fileOps, skills int
}

type usageTotals struct {
	reported                            bool
	input, output, thought, cachedRead  int
	thoughtReported, cachedReadReported bool
}

type heldReply struct {
	to     *actor.PID
	answer *Reply
	res    *TurnResult
}

// deliver sends a turn's result where its prompt waits.
func (s *session) deliver(to *actor.PID, r *Reply, res *TurnResult) {
	switch {
	case r != nil:
		s.rt.answer(s.id, r, res)
	case to != nil:
		s.rt.out.Deliver(s.id, to, res)
	}
}

func newSession(rt *Runtime, st *SessionState) *session {
	s := &session{
		rt:      rt,
		id:      st.ID,
		cwd:     st.Cwd,
		created: st.Created,
		prov:    st.Provenance,
		mode:    st.Mode,
		modelID: st.Model,
		history: st.History,
		usage:   usageFromStore(st.Usage),
	}
	if s.created.IsZero() {
		s.created = time.Now()
	}
	if s.prov.Kind == "" {
		s.prov = store.Provenance{SessionID: s.id, Kind: "root"}
	}
	if s.mode == "" {
		s.mode = rt.defaultMode()
	}
	if _, ok := rt.models[s.modelID]; !ok {
		s.modelID = "default"
	}
	// The stored system prompt is always replaced by the current one.
	system := llm.Message{Role: llm.RoleSystem, Content: configs.SystemPrompt(s.cwd)}
	if len(s.history) > 0 && s.history[0].Role == llm.RoleSystem {
		s.history = append([]llm.Message{system}, s.history[1:]...)
	} else {
		s.history = append([]llm.Message{system}, s.history...)
	}
	return s
}

func (s *session) Receive(ctx actor.Context) {
	// A panic here would make protoactor restart the actor, and a restart
	// loses the session's state: the current turn fails instead, and the
	// session goes on.
	defer s.survive(ctx)
	switch m := ctx.Message().(type) {
	case *StartTurn:
		s.onStartTurn(ctx, m)
	case *compactDone:
		s.onCompactDone(ctx, m)
	case *CancelTurns:
		s.onCancel(ctx, m.UpTo)
	case *ResponseWritten:
		s.announce()
	case *slotGranted:
		s.onSlot(ctx, m.Turn)
	case *modelDelta:
		s.onDelta(m)
	case *modelDone:
		s.onModelDone(ctx, m)
	case *toolPrepared:
		s.onToolPrepared(ctx, m)
	case *toolStarted:
		s.onToolStarted(m)
	case *toolRemember:
		s.onToolRemember(m)
	case *toolFinished:
		s.onToolFinished(ctx, m)
	case *persisted:
		s.onPersisted(ctx)
	case *Flush:
		s.onFlush(ctx)
	case *Replay:
		s.onReplay(ctx, m)
	case *GetState:
		ctx.Respond(s.state())
	case *SetMode:
		s.onSetMode(ctx, m)
	case *SetModel:
		s.onSetModel(ctx, m)
	case *actor.Started:
		s.startPersistence(ctx)
	case *actor.Stopping:
		// The process or the client is going away: every turn ends
		// cancelled, and so does any that arrives until the actor is
		// gone. Children are stopped by the actor system after this.
		s.closing = true
		s.onCancel(ctx, ^uint64(0))
		if t := s.cur; t != nil && s.held == nil {
			s.finish(ctx, t, acp.StopReasonCancelled, "")
		}
		if h := s.held; h != nil {
			// The writer flushes the file on its own; the reply goes now.
			s.held = nil
			s.deliver(h.to, h.answer, h.res)
		}
		s.stopPersistence()
	}
}

func (s *session) survive(ctx actor.Context) {
	r := recover()
	if r == nil {
		return
	}
	s.rt.log.Error(fmt.Sprintf("[acp] session %s: internal error on %T: %v", s.id, ctx.Message(), r))
	t := s.cur
	if t == nil || s.held != nil {
		return
	}
	for _, pid := range t.live {
		ctx.Stop(pid)
	}
	if _, ok := t.live["model"]; ok {
		s.model = nil
	}
	if t.state == turnRunning || t.state == turnWaiting {
		ctx.Send(s.rt.turns, &releaseSlot{Turn: t.id})
	}
	s.reply(t, &TurnResult{Err: fmt.Sprintf("mm failed: %v", r)})
	s.cur = nil
	s.next(ctx)
}

// announce queues available_commands_update, once.
func (s *session) announce() {
	if s.announced {
		return
	}
	s.announced = true
	s.rt.out.Update(s.id, acp.SessionUpdate{AvailableCommandsUpdate: &acp.SessionAvailableCommandsUpdate{
		AvailableCommands: Commands(),
	}})
}

// Commands lists the slash commands session/prompt intercepts.
func Commands() []acp.AvailableCommand {
	return []acp.AvailableCommand{
		{Name: "new", Description: "Clear the history and start a new session"},
		{Name: "compact", Description: "Compress the history now, keeping the last turns"},
	}
}

func (s *session) onStartTurn(ctx actor.Context, m *StartTurn) {
	t := &turn{
		id:      s.rt.nextTurn.Add(1),
		seq:     m.Seq,
		text:    m.Text,
		replyTo: ctx.Sender(),
		out:     m.Reply,
	}
	if (m.Seq != 0 && m.Seq <= s.cancelUpTo) || s.closing {
		s.reply(t, &TurnResult{StopReason: acp.StopReasonCancelled, Usage: s.usage.acp()})
		return
	}
	s.queue = append(s.queue, t)
	s.next(ctx)
}

// next starts the first queued turn when none is current.
func (s *session) next(ctx actor.Context) {
	for s.cur == nil && s.held == nil && len(s.queue) > 0 {
		t := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.cur = t
		switch strings.TrimSpace(t.text) {
		case "/new":
			t.slash = true
			s.slashNew(ctx, t)
		case "/compact":
			t.slash = true
			s.slashCompact(ctx, t)
		default:
			t.histStart = len(s.history)
			s.history = append(s.history, llm.Message{Role: llm.RoleUser, Content: t.text})
			t.state = turnWaiting
			ctx.Send(s.rt.turns, &acquireSlot{Turn: t.id, Session: ctx.Self()})
		}
	}
	if len(s.queue) == 0 {
		s.queue = nil
	}
}

func (s *session) onSlot(ctx actor.Context, id uint64) {
	t := s.cur
	if t == nil || t.id != id || t.state != turnWaiting {
		// The turn was cancelled while the grant was on its way.
		ctx.Send(s.rt.turns, &releaseSlot{Turn: id})
		return
	}
	t.state = turnRunning
	switch {
	case t.compact:
		s.startCompaction(ctx, t)
	case s.needsCompaction():
		t.auto = true
		s.startCompaction(ctx, t)
	default:
		s.callModel(ctx, t)
	}
}

// callModel spawns the actor of the turn's next model call.
func (s *session) callModel(ctx actor.Context, t *turn) {
	t.calls++
	t.answer.Reset()
	req := llm.Request{
		// No copy: the session only appends while the call runs (and
		// replaces the slice on /new and /compact), never rewriting the
		// messages this view covers; its capacity stops the model side
		// from ever seeing later ones.
		Messages:    s.history[:len(s.history):len(s.history)],
		Tools:       s.rt.toolDefs,
		MaxTokens:   s.rt.cfg.Model.MaxTokens,
		Temperature: s.rt.cfg.Model.Temperature,
	}
	s.runModel(ctx, t, &runModel{Turn: t.id, Call: t.calls, Model: s.modelID, Req: req})
}

// runModel hands a call to the session's model actor, spawning it if the
// last cancel stopped it.
func (s *session) runModel(ctx actor.Context, t *turn, r *runModel) {
	if s.model == nil {
		s.model = ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return &modelActor{rt: s.rt} }, actor.WithMailbox(actor.UnboundedLockfree()), actor.WithDispatcher(s.rt.pool)))
	}
	if t.live == nil {
		t.live = make(map[string]*actor.PID, 1)
	}
	t.live["model"] = s.model
	ctx.Send(s.model, r)
}

// spawn starts a child that works for turn t, tracked under key.
func (s *session) spawn(ctx actor.Context, t *turn, key string, a actor.Actor) *actor.PID {
	pid := ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return a }, actor.WithMailbox(actor.UnboundedLockfree()), actor.WithDispatcher(s.rt.pool)))
	if t.live == nil {
		t.live = make(map[string]*actor.PID, 1)
	}
	t.live[key] = pid
	return pid
}

// settle stops the child under key, whose work is over. It reports whether
// the turn was cancelled meanwhile (and finishes it when nothing is left).
func (s *session) settle(ctx actor.Context, t *turn, key string) (cancelled bool) {
	if pid, ok := t.live[key]; ok {
		// A cancelled turn's children are already poisoned; the model
		// actor is otherwise kept for the next call.
		if !t.cancelled && key != "model" {
			ctx.Stop(pid)
		}
		delete(t.live, key)
	}
	if t.cancelled {
		if len(t.live) == 0 {
			s.finish(ctx, t, acp.StopReasonCancelled, "")
		}
		return true
	}
	return false
}

func (s *session) onDelta(m *modelDelta) {
	t := s.cur
	if t == nil || t.id != m.Turn || t.calls != m.Call || t.cancelled {
		return
	}
	block := acp.TextBlock(m.Delta.Text)
	switch m.Delta.Kind {
	case llm.DeltaReasoning:
		s.rt.out.Update(s.id, acp.SessionUpdate{AgentThoughtChunk: &acp.SessionUpdateAgentThoughtChunk{Content: block}})
	default:
		t.answer.WriteString(m.Delta.Text)
		s.rt.out.Update(s.id, acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: block}})
	}
}

func (s *session) onModelDone(ctx actor.Context, m *modelDone) {
	t := s.cur
	if t == nil || t.id != m.Turn || t.calls != m.Call {
		return
	}
	if s.settle(ctx, t, "model") {
		return
	}
	if m.Err != "" {
		s.keepAnswer(t)
		if m.Canceled {
			s.finish(ctx, t, acp.StopReasonCancelled, "")
		} else {
			s.finish(ctx, t, "", m.Err)
		}
		return
	}
	r := m.Response
	if r.Usage != nil {
		s.usage.add(r.Usage)
		s.lastUsed = r.Usage.InputTokens + r.Usage.OutputTokens
		s.usageUpdate(s.lastUsed)
	}
	text := r.Text
	if text == "" {
		text = t.answer.String()
	}
	t.answer.Reset()
	calls := r.ToolCalls
	if r.FinishReason == llm.FinishLength {
		// Calls cut at the token limit have broken arguments: none runs.
		calls = nil
	}
	if text != "" || len(calls) > 0 {
		s.history = append(s.history, llm.Message{Role: llm.RoleAssistant, Content: text, ToolCalls: calls})
	}
	switch {
	case r.FinishReason == llm.FinishLength:
		s.finish(ctx, t, acp.StopReasonMaxTokens, "")
	case len(calls) > 0:
		t.pending = calls
		s.nextTool(ctx, t)
	default:
		s.finish(ctx, t, acp.StopReasonEndTurn, "")
	}
}

// keepAnswer appends what the model streamed before a failure or cancel, so
// the history holds everything the user saw.
func (s *session) keepAnswer(t *turn) {
	if t.answer.Len() > 0 {
		s.history = append(s.history, llm.Message{Role: llm.RoleAssistant, Content: t.answer.String()})
		t.answer.Reset()
	}
}

func (s *session) onCancel(ctx actor.Context, upTo uint64) {
	if upTo > s.cancelUpTo {
		s.cancelUpTo = upTo
	}
	kept := s.queue[:0]
	for _, q := range s.queue {
		if q.seq <= upTo {
			s.reply(q, &TurnResult{StopReason: acp.StopReasonCancelled, Usage: s.usage.acp()})
			continue
		}
		kept = append(kept, q)
	}
	s.queue = kept
	t := s.cur
	if t == nil || s.held != nil || t.seq > upTo || t.cancelled {
		return // a held turn is over: it only waits for the disk
	}
	t.cancelled = true
	switch t.state {
	case turnWaiting:
		ctx.Send(s.rt.turns, &releaseSlot{Turn: t.id})
		s.finish(ctx, t, acp.StopReasonCancelled, "")
	case turnRunning:
		s.keepAnswer(t)
		if len(t.live) == 0 {
			s.finish(ctx, t, acp.StopReasonCancelled, "")
			return
		}
		// Poison the in-flight work. Each goroutine sends its final
		// message once its context is cancelled (a bash command's process
		// group killed, a permission request abandoned); the turn ends
		// when the last one has, so nothing it started outlives it.
		for _, pid := range t.live {
			ctx.Poison(pid)
		}
		if _, ok := t.live["model"]; ok {
			s.model = nil // poisoned: the next call gets a new one
		}
	}
}

// finish ends the current turn: it frees the slot, mends the history, sends
// the closing usage_update and queues the reply behind the turn's updates.
func (s *session) finish(ctx actor.Context, t *turn, stop acp.StopReason, errText string) {
	if t != s.cur {
		return
	}
	if t.state == turnRunning {
		ctx.Send(s.rt.turns, &releaseSlot{Turn: t.id})
	}
	if !t.slash {
		s.answerPending(t, "[not run: the turn was cancelled]")
		if len(s.history) == t.histStart+1 {
			// The question got no answer at all: drop it, so the next
			// turn does not start from a dangling user message.
			s.history = s.history[:t.histStart]
		}
		s.rt.log.Info(fmt.Sprintf("[acp] turn done: %d command(s) · %d file op(s) · %d skill(s)", t.commands, t.fileOps, t.skills))
	}
	s.usageUpdate(max(s.lastUsed, s.estimate()))
	res := &TurnResult{StopReason: stop, Usage: s.usage.acp()}
	if errText != "" {
		res = &TurnResult{Err: errText}
	}
	if t.slash {
		res.Provenance = s.prov
	}
	if s.writer != nil && stop == acp.StopReasonCancelled {
		// A cancel answers at once; the file follows in the background,
		// encoded after the answer is queued.
		s.reply(t, res)
		s.save(ctx, false)
		s.cur = nil
		s.next(ctx)
		return
	} else if s.writer != nil && !s.stopping(ctx) {
		// The next turn waits too: replies go out in order, each after
		// the file that holds its turn.
		s.held = &heldReply{to: t.replyTo, answer: t.out, res: res}
		s.save(ctx, true)
		return
	}
	s.reply(t, res)
	s.cur = nil
	s.next(ctx)
}

// onPersisted releases the reply held for the session file.
func (s *session) onPersisted(ctx actor.Context) {
	h := s.held
	if h == nil {
		return
	}
	s.held = nil
	s.deliver(h.to, h.answer, h.res)
	s.cur = nil
	s.next(ctx)
}

// stopping says the actor is stopping, when no reply may wait for the disk.
func (s *session) stopping(ctx actor.Context) bool {
	_, ok := ctx.Message().(*actor.Stopping)
	return ok
}

func (s *session) reply(t *turn, res *TurnResult) {
	s.deliver(t.replyTo, t.out, res)
}

func (s *session) usageUpdate(used int) {
	s.rt.out.Update(s.id, acp.SessionUpdate{UsageUpdate: &acp.SessionUsageUpdate{
		Used: used,
		Size: s.rt.windowFor(s.modelID),
	}})
}

// estimate guesses the history's size in tokens (four bytes a token) for
// servers that report nothing.
func (s *session) estimate() int {
	n := 0
	for i := range s.history {
		m := &s.history[i]
		n += len(m.Content) + 4
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	return n / 4
}

func (u *usageTotals) add(r *llm.Usage) {
	u.reported = true
	u.input += r.InputTokens
	u.output += r.OutputTokens
	if r.ThoughtTokens > 0 {
		u.thought += r.ThoughtTokens
		u.thoughtReported = true
	}
	if r.CachedReadTokens > 0 {
		u.cachedRead += r.CachedReadTokens
		u.cachedReadReported = true
	}
}

// acp returns the session totals for a prompt response, nil until the
// server has reported a count.
func (u *usageTotals) acp() *acp.Usage {
	if !u.reported {
		return nil
	}
	out := &acp.Usage{InputTokens: u.input, OutputTokens: u.output, TotalTokens: u.input + u.output}
	if u.thoughtReported {
		// Reasoning tokens are part of the output count servers report.
		out.ThoughtTokens = acp.Ptr(u.thought)
	}
	if u.cachedReadReported {
		out.CachedReadTokens = acp.Ptr(u.cachedRead)
	}
	return out
}
