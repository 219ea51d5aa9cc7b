package actors

import (
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/prompt"
	"github.com/mm-agent/mm/tools"
	"github.com/mm-agent/mm/tools/skills"
)

// The turn flow: a prompt arrives (StartTurn), queues behind the session's
// current turn, has its @mentions looked up, asks the serializer for a slot,
// calls the model, runs its tools (tools.go), and ends with a reply.

type turnState uint8

const (
	turnQueued    turnState = iota // waiting behind the session's current turn
	turnChecking                   // the store is asked whether this copy still holds the session
	turnPreparing                  // its @mentions are looked up, off the actor
	turnWaiting                    // waiting for a slot from the serializer
	turnRunning                    // holding a slot: the model or a tool works
	turnAsking                     // a person is asked; the slot went back
	turnEnding                     // cancelled: holds no slot, wants none
)

// turn is the state of one prompt while it runs.
type turn struct {
	id  uint64 // process-wide, for the serializer
	seq uint64 // the prompt's sequence in its session
	// arrived is when the prompt reached its session; asked is the
	// instructions watch's ticket when it reached mm (StartTurn.Asked).
	arrived time.Time
	asked   uint64
	// text is what the user typed; extra (pasted files, notes) and images
	// join it in the user message (history.Flatten).
	text   string
	extra  string
	images []history.Image
	out    Reply
	state  turnState
	slash  bool // /new or /compact

	// tooLarge says why the prompt is refused: its text is over
	// prompt.maxTextBytes. It was never copied into text.
	tooLarge string
	// compact marks a /compact turn; auto marks a compression that runs
	// before the turn's first model call. cut and started belong to the
	// compression in flight.
	compact, auto bool
	cut           int
	// compactionID names the compaction under way to a client that shows
	// compaction updates (session.compaction); "" otherwise.
	compactionID string
	started      time.Time

	histStart int // len(history) before the user message was appended
	calls     int // model calls made
	// last is set for the turn's last model call (turns.maxModelCalls),
	// made without tools.
	last bool
	// messageID names the model's reply to the current call: every chunk
	// of it, thoughts and text, carries it (ACP's messageId).
	messageID *string
	// live holds the model and tool actors whose goroutine has not yet
	// sent its final message ("model", or the tool's ACP call id). A
	// cancelled turn ends when it is empty: nothing it started is left.
	live      map[string]*actor.PID
	answer    strings.Builder // text of the current model call
	cancelled bool
	// pending are the tool calls of the last model answer not yet run;
	// tool is the one running.
	pending []history.ToolCall
	tool    history.ToolCall
	// What the running call's tool_call showed, kept with its result;
	// announced is set once that tool_call was sent: nothing is said about
	// a call before it.
	toolTitle string
	toolKind  acp.ToolKind
	toolInput map[string]any
	announced bool
	// resume is the tool worker waiting for its slot back after a
	// permission answer.
	resume *actor.PID
	// lastCall is the last tool call (callKey) and repeats how many times
	// in a row it was made: the loop detector.
	lastCall string
	repeats  int
	// skillNames are the skills read, for the recap.
	skillNames []string

	commands, fileOps, skills int
	// trimmed is set once the user was told that the turn's requests
	// leave old messages out (window.go).
	trimmed bool
	// toldWaiting is set once its user was told why it waits for a
	// slot (the serializer tells after slotPatience).
	toldWaiting bool
}

func (s *session) onStartTurn(ctx actor.Context, m *StartTurn) {
	t := &turn{
		id:      s.rt.nextTurn.Add(1),
		seq:     m.Seq,
		out:     m.Reply,
		arrived: time.Now(),
		asked:   m.Asked,
	}
	limit := int(s.rt.cfg.Prompt.MaxResourceBytes)
	if t.tooLarge = history.TooMuchText(m.Prompt, limit, int(s.rt.cfg.Prompt.MaxTextBytes)); t.tooLarge == "" {
		t.text, t.extra, t.images = history.Flatten(m.Prompt, limit, s.rt.visionFor(s.modelID), uriPath)
	}
	s.lastSeq = max(s.lastSeq, m.Seq)
	if s.cancelOne[m.Seq] || (m.Seq != 0 && m.Seq <= s.cancelUpTo) || s.closing || s.cancelIDs[m.Reply.ID] {
		delete(s.cancelOne, m.Seq)
		delete(s.cancelIDs, m.Reply.ID)
		res := &TurnResult{StopReason: acp.StopReasonCancelled, Usage: s.usage.acp()}
		s.turnEnded(t, res)
		s.reply(t, res)
		return
	}
	if s.unanswered() >= maxWaiting {
		// Nothing of it is kept: the turn never was (its number and id
		// are not the session's history).
		s.answer(m.Reply, &TurnResult{Refused: tooManyPrompts})
		return
	}
	s.rt.turnStarted(s.modelID)
	s.queue = append(s.queue, t)
	s.next(ctx)
}

// unanswered counts the session's prompts not answered yet: queued,
// current, or answered once its file is written (held).
func (s *session) unanswered() int {
	n := len(s.queue)
	if s.cur != nil {
		n++
	}
	if s.held != nil {
		n++
	}
	return n
}

// next starts the first queued turn when none is current.
func (s *session) next(ctx actor.Context) {
	for s.cur == nil && s.held == nil && len(s.queue) > 0 {
		t := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.cur = t
		if t.tooLarge != "" {
			// Refused in its place in the session's order, as a prompt
			// too large for the window is (begin): an error answer, the
			// history untouched, nothing looked up.
			t.histStart = len(s.history)
			s.finish(ctx, t, "", t.tooLarge)
			continue
		}
		if s.writer != nil && s.writer.Fences() {
			// Another activation may have served the session since this
			// one's last save (a partition, a node counted out): the turn
			// runs on what the store holds, never on a staler copy.
			t.state = turnChecking
			t.histStart = len(s.history) // what a cancel meanwhile keeps
			s.checkHolds(ctx, t.id, nil)
			continue
		}
		s.prepare(ctx, t)
	}
	if len(s.queue) == 0 {
		s.queue = nil
	}
	if s.idle() {
		s.settled()
		s.moved(ctx)
	}
}

// prepare starts turn t, current and checked: a slash command, or its
// prompt once its skills and @mentions are looked up.
func (s *session) prepare(ctx actor.Context, t *turn) {
	if s.agents != nil {
		t.text = askCommand(t.text)
	}
	switch strings.TrimSpace(t.text) {
	case "/new":
		t.slash = true
		s.slashNew(ctx, t)
	case "/compact":
		t.slash = true
		s.slashCompact(ctx, t)
	default:
		t.histStart = len(s.history)
		// The file system may be slow (a network mount): skills, @mentions
		// and the project's instructions are looked up on a work
		// goroutine, in the turn's place in the session's order; the first
		// turn also waits there for the environment (system.go).
		t.state = turnPreparing
		text := t.text
		named, mentions := mayNameSkill(text), history.HasMentions(text)
		fresh := s.fresh(s.instructionBytes(), t.asked)
		if s.takeEnv(); fresh && !named && !mentions && s.sys.envReady {
			// Nothing to look up: the turn goes on here, at once.
			s.onPromptReady(ctx, &promptReady{Turn: t.id, Text: text})
			return
		}
		root, self, id, cwd, log, dirs := ctx.ActorSystem().Root, ctx.Self(), s.id, s.cwd, s.rt.log, s.skillDirs
		var within func(string) bool
		if mentions {
			within = tools.Env{Roots: s.roots, Foreign: s.foreign()}.Mentionable
		}
		var finder prompt.Finder
		if !fresh {
			finder = s.finder()
		}
		sysRoot, files, empty, waitEnv := s.sys.root, s.sys.files, s.sys.empty, s.waitEnv()
		turnID := t.id
		watch := s.rt.watch
		s.rt.goWork(func() {
			var set *skills.Set
			if named {
				set = skills.Load(dirs)
				text = withSkills(text, set)
			}
			left := 0
			if mentions {
				text, left = attach(text, cwd, within, func(path string) {
					log.Info(fmt.Sprintf("[acp] session %s: attached %s", id, path))
				})
			}
			m := &promptReady{Turn: turnID, Text: text, Skills: set, MentionsLeft: left}
			if !fresh {
				m.Looked, m.Bytes = true, finder.MaxBytes
				m.Instructions, m.Empty, m.Watched = finder.Watched(watch, id, sysRoot, cwd, files, empty)
			}
			waitEnv()
			root.Send(self, m)
		})
	}
}

func (s *session) onPromptReady(ctx actor.Context, m *promptReady) {
	s.useSkills(m.Skills)
	s.useInstructions(m)
	if !s.modelBusy() {
		s.applySystem()
	}
	if t := s.cur; t != nil && t.id == m.Turn && t.state == turnPreparing {
		t.text = m.Text
		if m.MentionsLeft > 0 {
			s.say("📎 " + history.MentionsLeft(m.MentionsLeft) + "\n\n")
		}
		s.begin(ctx, t)
	}
}

// begin appends the user message and queues the turn for a slot.
func (s *session) begin(ctx actor.Context, t *turn) {
	s.tellMCPNotes()
	user := history.Message{Role: history.RoleUser, Content: t.text + t.extra, Images: t.images}
	t.text, t.extra, t.images = "", "", nil
	if why := s.promptTooLarge(&user); why != "" {
		// Refused whole: a prompt that cannot be sent never enters the
		// history, where it would stay too large for every request.
		s.finish(ctx, t, "", why)
		return
	}
	s.history = append(s.history, user)
	s.acquire(ctx, t)
}

// acquire asks the serializer for the turn's slot.
func (s *session) acquire(ctx actor.Context, t *turn) {
	t.state = turnWaiting
	ctx.Send(s.rt.turns, &acquireSlot{Turn: t.id, Session: ctx.Self(), Owner: s.owner})
}

// onSlotQueue tells the user, once per turn, why the turn waits.
func (s *session) onSlotQueue(m *slotQueue) {
	t := s.cur
	if t == nil || t.id != m.Turn || t.state != turnWaiting || t.toldWaiting {
		return
	}
	t.toldWaiting = true
	s.out.Update(s.id, acp.SessionUpdate{AgentThoughtChunk: &acp.SessionUpdateAgentThoughtChunk{
		Content: acp.TextBlock(fmt.Sprintf("⏳ waiting for another session's turn (%d ahead)\n", m.Ahead)),
	}})
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
	case t.resume != nil:
		// A tool call was answered by the user: it runs now.
		pid := t.resume
		t.resume = nil
		ctx.Send(pid, &toolProceed{})
	case t.compact:
		s.startCompaction(ctx, t)
	case s.compactionDue():
		t.auto = true
		s.startCompaction(ctx, t)
	default:
		s.callModel(ctx, t)
	}
}

// modelBusy says whether a model call of the session is in flight: its
// request shares the history's first message, which must not change then.
func (s *session) modelBusy() bool {
	return s.cur != nil && s.cur.live["model"] != nil
}

// callModel sends the turn's next model call to the session's model actor.
func (s *session) callModel(ctx actor.Context, t *turn) {
	s.applySystem()
	t.calls++
	t.answer.Reset()
	id := NewMessageID()
	t.messageID = &id
	// No copy when the history fits: the session only appends while the
	// call runs (and replaces the slice on /new and /compact), never
	// rewriting the messages this view covers; its capacity stops the
	// model side from ever seeing later ones.
	msgs, left, tooBig := s.fit(t)
	if tooBig != "" {
		s.finish(ctx, t, "", tooBig)
		return
	}
	if left > 0 && !t.trimmed {
		t.trimmed = true
		line := fmt.Sprintf("✂️ %d earlier message(s) left out of the request: the conversation no longer fits the model's context window (%d tokens)", left, s.rt.windowFor(s.modelID))
		s.say(line + "\n\n")
		s.rt.log.Info(fmt.Sprintf("[acp] session %s: %s", s.id, line))
	}
	req := llm.Request{
		Messages:    msgs,
		Tools:       s.toolDefs,
		MaxTokens:   s.rt.cfg.Model.MaxTokens,
		Temperature: s.rt.cfg.Model.Temperature,
	}
	if max := s.rt.cfg.Turns.MaxModelCalls; t.calls >= max && max > 1 {
		// The turn's last call: no tools, and a note that asks for where
		// the work stands, so that a long task ends with a report rather
		// than in silence. The note is for this request alone.
		t.last = true
		req.ToolsOff = true
		note := history.Message{Role: history.RoleUser, Content: strings.ReplaceAll(strings.TrimSpace(configs.LastCallNote()), "{{calls}}", fmt.Sprint(max))}
		req.Messages = append(msgs[:len(msgs):len(msgs)], note)
		s.rt.log.Info(fmt.Sprintf("[acp] session %s: call %d of %d (turns.maxModelCalls): the last, without tools", s.id, t.calls, max))
	}
	s.runModel(ctx, t, &runModel{Turn: t.id, Call: t.calls, Model: s.modelID, Req: req})
}

// runModel hands a call to the session's model actor, spawning it if the
// last cancel stopped it.
func (s *session) runModel(ctx actor.Context, t *turn, r *runModel) {
	if s.model == nil {
		s.model = ctx.Spawn(s.rt.props(func() actor.Actor { return &modelActor{rt: s.rt, budget: s.budget} }))
	}
	if t.live == nil {
		t.live = make(map[string]*actor.PID, 1)
	}
	t.live["model"] = s.model
	ctx.Send(s.model, r)
}

// spawn starts a child that works for turn t, tracked under key.
func (s *session) spawn(ctx actor.Context, t *turn, key string, a actor.Actor) *actor.PID {
	pid := ctx.Spawn(s.rt.props(func() actor.Actor { return a }))
	if t.live == nil {
		t.live = make(map[string]*actor.PID, 1)
	}
	t.live[key] = pid
	return pid
}

func (s *session) onDelta(m *modelDelta) {
	t := s.cur
	if t == nil || t.id != m.Turn || t.calls != m.Call || t.cancelled {
		s.budget.Give(m.Cost)
		return
	}
	block := acp.TextBlock(m.Delta.Text)
	if m.Delta.Kind == llm.DeltaNotice {
		s.rt.metrics.Retry() // a notice is a retry's wait
	}
	switch m.Delta.Kind {
	case llm.DeltaReasoning, llm.DeltaNotice:
		// A notice (a retry wait) is about the call, not the answer: it
		// shows beside the model's thoughts, and is no part of the reply:
		// it carries no message id.
		var id *string
		if m.Delta.Kind == llm.DeltaReasoning {
			id = t.messageID
		}
		s.out.Stream(s.id, acp.SessionUpdate{AgentThoughtChunk: &acp.SessionUpdateAgentThoughtChunk{Content: block, MessageId: id}}, s.budget, m.Cost)
	default:
		t.answer.WriteString(m.Delta.Text)
		s.out.Stream(s.id, acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: block, MessageId: t.messageID}}, s.budget, m.Cost)
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
		s.rt.metrics.Tokens(r.Usage.InputTokens, r.Usage.OutputTokens)
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
		s.history = append(s.history, history.Message{Role: history.RoleAssistant, Content: text, ToolCalls: calls})
	}
	switch {
	case r.FinishReason == llm.FinishLength:
		s.finish(ctx, t, acp.StopReasonMaxTokens, "")
	case t.last:
		// The summary call: a tool it asked for anyway is not run.
		t.pending = calls
		s.answerPending(t, "[not run: this turn used its model calls (turns.maxModelCalls)]")
		s.finish(ctx, t, acp.StopReasonMaxTurnRequests, "")
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
		s.history = append(s.history, history.Message{Role: history.RoleAssistant, Content: t.answer.String()})
		t.answer.Reset()
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
	t.state = turnEnding
	if !t.slash {
		s.answerPending(t, "[not run: the turn was cancelled]")
		if len(s.history) == t.histStart+1 {
			// The question got no answer at all: drop it, so the next
			// turn does not start from a dangling user message.
			s.history = s.history[:t.histStart]
		}
		if len(t.skillNames) > 0 {
			s.say(fmt.Sprintf("\n\n📖 %d skill(s): %s", len(t.skillNames), strings.Join(t.skillNames, ", ")))
		}
		s.rt.log.Info(fmt.Sprintf("[acp] turn done: %d command(s) · %d file op(s) · %d skill(s)", t.commands, t.fileOps, t.skills))
	}
	s.infoUpdate()
	s.usageUpdate(max(s.lastUsed, s.estimate()))
	res := &TurnResult{StopReason: stop, Usage: s.usage.acp()}
	if errText != "" {
		// Editors show an error's message and little else: the reason
		// goes there (TurnResult.Err), and to the log.
		res = &TurnResult{Err: errText}
		s.rt.log.Error(fmt.Sprintf("[acp] session %s: turn failed: %s", s.id, errText))
	}
	if t.slash {
		res.Provenance = s.prov
	}
	s.turnEnded(t, res)
	if s.writer != nil && stop == acp.StopReasonCancelled {
		// A cancel answers at once; the file follows in the background,
		// encoded after the answer is queued.
		s.reply(t, res)
		s.save(ctx, false)
		s.cur = nil
		s.next(ctx)
		return
	} else if s.writer != nil && !s.closing {
		// The next turn waits too: replies go out in order, each after
		// the file that holds its turn.
		s.held = &heldReply{answer: t.out, res: res}
		s.save(ctx, true)
		return
	}
	s.reply(t, res)
	s.cur = nil
	s.next(ctx)
}

// onPersisted releases the reply held for the session file. A save that
// failed turns the reply into an error that says so: the user was shown
// the turn, and must not believe it kept when the store did not take it
// (the session keeps it in memory, and its next save writes it, with the
// turns after it). A turn that failed already keeps its own error.
func (s *session) onPersisted(ctx actor.Context, m *persisted) {
	h := s.held
	if h == nil {
		return
	}
	s.held = nil
	if m.Err != "" && h.res.Err == "" {
		h.res = &TurnResult{Err: fmt.Sprintf("session %s: this turn could not be saved, so it is not kept yet (%s); it stays in this session and is saved with the next turn that can be", s.id, m.Err)}
	}
	s.answer(h.answer, h.res)
	s.cur = nil
	s.next(ctx)
}

func (s *session) reply(t *turn, res *TurnResult) {
	s.answer(t.out, res)
}

// settled answers the requests waiting for the session to have no turn.
func (s *session) settled() {
	for _, to := range s.settlers {
		s.rt.sys.Root.Send(to, &Done{})
	}
	s.settlers = nil
}
