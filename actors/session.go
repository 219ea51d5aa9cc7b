package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/agents"
	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/procs"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/lsp"
	"github.com/mm-agent/mm/mcpclient"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools/skills"
)

// session is the actor of one ACP session. Only its Receive touches its
// fields; everything else reaches it by message. The turn flow is in
// turn.go, the tool phase in tools.go, cancellation in cancel.go.
type session struct {
	rt *Runtime
	// out and client are the connection the session is attached to: where
	// everything it says goes, and whom its tools ask. Attach moves them,
	// in the session's order.
	out    Outbox
	client Client
	id     string
	owner  string
	cwd    string
	// roots are the folders its file tools may open (SessionState.Roots).
	roots []string
	// compactions counts the compactions told as updates (their ids).
	compactions int
	// dirs are its additional directories (SessionState.Dirs).
	dirs    []string
	created time.Time
	prov    store.Provenance
	// mode is "ask" (permission before mutating tools) or "yolo".
	mode string
	// modelID selects the model among the runtime's ("default" first).
	modelID string
	// handle is the edge's handle on this session (SpawnSession).
	handle *Session
	// writer persists the session file; nil when sessions are not enabled.
	writer *store.Writer
	// fenced is set once a save was fenced: another mm took the session
	// over, and this copy stops (persist.go).
	fenced bool
	// rev is the stored revision the session was loaded at, which its
	// writer's saves are fenced on (SessionState.Rev).
	rev int64
	// held is a finished turn's reply waiting for its session file to be
	// written: the client hears end_turn only once the turn is on disk.
	held *heldReply
	// keep is a conversation /new set aside, written before the next save.
	keep *keepJob
	// model is the actor that runs this session's model calls (model.go);
	// nil until the first call and after a cancel poisoned it.
	model *actor.PID
	// budget bounds the streamed output on its way to the client.
	budget *Budget
	// skillDirs are the session's skill folders; skills the catalog last
	// read from them (skills.go).
	skillDirs []string
	skills    *skills.Set
	// sys is what its system message is made of (system.go).
	sys sysState
	// tempDir is the session's temporary folder under Landlock (sandbox.go).
	tempDir string
	// net is the session's own network for its confined commands, made
	// when the first of them needs it (sandbox.go); nil: none yet.
	net *sandbox.Network
	// outputDir is the session's folder of whole outputs (tools.Output),
	// "" when none are kept; outputGiven says a tool was handed it, which
	// only a tool's result makes: a session that ran none has nothing to
	// remove as it ends.
	outputDir   string
	outputGiven bool
	// sandboxMode is the session's sandbox mode: the runtime's, or one no
	// wider set over ACP (sandbox.go).
	sandboxMode sandbox.Mode
	// network says whether its confined commands reach the network: the
	// runtime's (sandbox.network), or off (SetNetwork).
	network bool
	// plan is the plan the model keeps with the plan tool.
	plan []history.PlanEntry
	// agents are the agents ask_agent reaches, started on first use.
	agents *agents.Pool
	// lsp are the language servers of the lsp tool, started on first use.
	lsp *lsp.Client
	// mcp are the session's MCP servers (mcp.go); toolDefs the tools
	// offered to the model, the built-in ones and theirs; mcpNotes what
	// went wrong with them, told at the next turn (maxMCPNotes at most,
	// mcpNotesLeft counting the others).
	mcp          *mcpclient.Sessions
	mcpServers   []mcpclient.Server
	toolDefs     []llm.ToolDef
	mcpNotes     []string
	mcpNotesLeft int

	history []history.Message
	// title and updatedAt are what session_info_update last told.
	title, updatedAt string
	// forget, when set, makes the file go when the session stops
	// (session/delete).
	forget bool
	// final is closed once the file is final after the actor stopped
	// (Session.final).
	final chan struct{}
	usage usageTotals
	// lastUsed is the context the model last reported using (input+output
	// tokens of its last call), 0 when forgotten.
	lastUsed int
	// compactFails counts the automatic compressions that failed in a
	// row; compactWait the turns still to start before the next try.
	compactFails, compactWait int

	// lastSeq is the highest prompt sequence that has arrived; cancelUpTo
	// the highest a cancel has covered, and cancelOne the single prompts
	// cancelled before they arrived: a prompt that arrives covered by
	// either was cancelled before it got here.
	lastSeq, cancelUpTo uint64
	cancelOne           map[uint64]bool
	// cancelIDs are the requests whose $/cancel_request came before their
	// prompt (CancelRequest), at most maxWaiting.
	cancelIDs map[jsonrpc.ID]bool
	cur       *turn
	queue     []*turn
	// closing is set once the actor is stopping.
	closing bool
	// announced is set once available_commands_update has been queued.
	announced bool
	// notice is a line the user is to hear before the commands are
	// announced (an untrusted session file, persist.go); "" once told.
	notice string
	// warnedSize is set once the log said the file outgrew
	// sessions.maxFileBytes.
	warnedSize bool
	// ranCommands is set once a command was started: only then can the
	// session have left processes running.
	ranCommands bool
	// settlers wait for the session to have no turn (Session.Settle).
	settlers []*actor.PID
	// calls serves what a cluster sends the session's actor, when a
	// cluster activated it (grain.go); callState is what they keep of it.
	calls     Calls
	callState any
	// opening is set while the session waits for its state (open.go),
	// which opener gives; failed is what its requests are answered once
	// its opening failed.
	opening bool
	opener  opening
	failed  any
	// received counts the messages of its handle's it took through its
	// mailbox (Here, leave).
	received uint64
	// ending is set once the session's end is served (stop): what the
	// edge sent after it is refused as it comes, in its order; leaving
	// once the actor waits, to stop, for what is still on its way (leave).
	ending, leaving bool
	// moving is a move to another connection waiting for the session's
	// turns to end (Session.Move); stash the edge's messages that came
	// while it opened or after the move, served in order once it is
	// done (unstashing until then).
	moving     *Attach
	stash      []any
	unstashing bool
	// allowAlways and never hold the remembered permission answers, by
	// tool name. They survive /new.
	allowAlways, never map[string]bool
}

type heldReply struct {
	answer Reply
	res    *TurnResult
}

// newSession builds the actor of a session whose state is known, off the
// actor (on the edge's goroutine for SpawnSession): its state, what it
// reads from the disk, and what it starts.
func newSession(rt *Runtime, st *SessionState, on Attachment, final chan struct{}) *session {
	s := &session{rt: rt, final: final}
	s.out, s.client = rt.attachment(on)
	s.fill(st)
	s.build(s.read())
	return s
}

// fill sets the session's fields from its state. It only assigns (no disk,
// no log): an opening session fills a copy of its own off the actor to
// read what it needs (read), and fills itself from the same state in its
// actor (opened).
func (s *session) fill(st *SessionState) {
	rt := s.rt
	s.id, s.owner, s.cwd, s.roots, s.dirs = st.ID, st.Owner, st.Cwd, st.Roots, st.Dirs
	s.created, s.prov, s.rev = st.Created, st.Provenance, st.Rev
	s.sandboxMode, s.network = rt.sandboxMode, rt.cfg.Sandbox.Network
	s.mode, s.modelID = st.Mode, st.Model
	s.history, s.usage, s.plan = st.History, usageFromStore(st.Usage), st.Plan
	if st.Provenance.Kind != "fork" {
		// A loaded session's title is the one session/list showed; a
		// fork's is news to the client, told after its first turn.
		s.title = history.Title(st.History)
	}
	s.mcpServers = rt.mcpServers(st.MCP)
	if s.created.IsZero() {
		s.created = time.Now()
	}
	if s.prov.Kind == "" {
		s.prov = store.Provenance{SessionID: s.id, Kind: "root"}
	}
	if st.Untrusted != "" && s.mode != ModeAsk {
		// A file not known to be the user's may narrow the mode, never
		// widen it (StateFromFile has said so in Untrusted).
		s.mode = ""
	}
	if s.mode == "" {
		s.mode = rt.defaultMode()
	}
	if st.Untrusted != "" {
		s.notice = st.Untrusted + ": the session runs in " + s.mode + " mode"
	}
	if _, ok := rt.models[s.modelID]; !ok {
		s.modelID = "default"
	}
	// The stored system prompt is always replaced by the current one, in
	// a slice of the session's own.
	s.history = append([]history.Message(nil), s.history...)
}

// build makes the session from what was read for it (read): its folders,
// its tools, its system message. It starts no actor: start does, in it.
func (s *session) build(r *reads) {
	rt := s.rt
	s.budget = newBudget(streamBudget)
	s.tempDir = landlockTemp(rt)
	s.outputDir = outputDir(rt, s.id)
	s.skillDirs, s.skills = r.SkillDirs, r.Skills
	if len(rt.cfg.LSP.Servers) > 0 {
		s.lsp = lsp.NewClient(lsp.Config{Servers: rt.cfg.LSP.Servers, Timeout: rt.cfg.LSP.Timeout, Confine: s.confine()}, s.cwd, s.id, rt.log)
	}
	if len(rt.cfg.Agents) > 0 {
		cfgs := rt.agentConfigs()
		confine := s.confine()
		for i := range cfgs {
			cfgs[i].Confine = confine
		}
		s.agents = agents.NewPool(cfgs, s.cwd, s.id, rt.log)
	}
	s.useTools()
	if s.notice != "" {
		rt.log.Warn(fmt.Sprintf("[acp] session %s: %s", s.id, s.notice))
	}
	s.openSystem(r)
}

func (s *session) Receive(ctx actor.Context) {
	// A panic here would make protoactor restart the actor, and a restart
	// loses the session's state: the current turn fails instead, and the
	// session goes on.
	defer s.survive(ctx)
	msg := ctx.Message()
	if posted(msg) {
		s.received++ // its handle's (Here, leave)
	}
	if s.calls != nil && s.clusters(ctx, msg) {
		return
	}
	s.take(ctx, msg)
}

// take serves one message as it comes: kept while the session opens or
// moves, served otherwise.
func (s *session) take(ctx actor.Context, msg any) {
	if s.ending && fromEdge(msg) {
		s.refuse(msg)
		if s.leaving {
			s.leave(ctx)
		}
		return
	}
	if (s.opening || s.moving != nil || s.unstashing) && fromEdge(msg) {
		s.stash = keep(s.stash, msg)
		return
	}
	if s.opening {
		s.whileOpening(ctx, msg)
		return
	}
	s.receive(ctx, msg)
}

// receive serves one message: the one in hand, or one the session kept
// while it moved.
func (s *session) receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case *StartTurn:
		s.onStartTurn(ctx, m)
	case *promptReady:
		s.onPromptReady(ctx, m)
	case *compactDone:
		s.onCompactDone(ctx, m)
	case *CancelTurns:
		s.onCancel(ctx, m)
	case *CancelRequest:
		s.onCancelRequest(ctx, m)
	case *Announce:
		s.announce()
	case *slotGranted:
		s.onSlot(ctx, m.Turn)
	case *slotQueue:
		s.onSlotQueue(m)
	case *modelDelta:
		s.onDelta(m)
	case *modelDone:
		s.onModelDone(ctx, m)
	case *toolPrepared:
		s.onToolPrepared(ctx, m)
	case *toolAsking:
		s.onToolAsking(ctx, m)
	case *toolAnswered:
		s.onToolAnswered(ctx, m)
	case *toolStarted:
		s.onToolStarted(m)
	case *toolProgress:
		s.onToolProgress(m)
	case *toolRemember:
		s.onToolRemember(m)
	case *toolFinished:
		s.onToolFinished(ctx, m)
	case *persisted:
		s.onPersisted(ctx, m)
	case *holds:
		s.onHolds(ctx, m)
	case *reloaded:
		s.onReloaded(ctx, m)
	case *fenced:
		s.onFenced(ctx, m)
	case *Flush:
		s.onFlush(ctx, m)
	case *Replay:
		s.onReplay(ctx, m)
	case *Resume:
		s.onResume(m)
	case *GetState:
		ctx.Send(m.ReplyTo, s.state())
	case *Attach:
		s.onAttach(ctx, m)
	case *unstash:
		s.onUnstash(ctx)
	case *endSession, *drained:
		s.stop(ctx)
	case *fileFinal:
		ctx.Stop(ctx.Self())
	case *drain:
		s.onCancel(ctx, &CancelTurns{UpTo: ^uint64(0)})
		s.endItself(ctx)
	case *settle:
		if s.idle() {
			ctx.Send(m.ReplyTo, &Done{})
		} else {
			s.settlers = append(s.settlers, m.ReplyTo)
		}
	case *Forget:
		s.onForget(ctx, m)
	case *SetMode:
		s.onSetMode(ctx, m)
	case *SetModel:
		s.onSetModel(ctx, m)
	case *SetSandbox:
		s.onSetSandbox(m)
	case *SetNetwork:
		s.onSetNetwork(m)
	case *mcpChanged:
		s.onMCPChanged()
	case *mcpWarning:
		s.onMCPWarning(m)
	case *actor.Started:
		s.start(ctx)
	case *actor.Stopping:
		s.onStopping(ctx)
	case *actor.Stopped:
		s.rt.watch.Drop(s.id)
		// The handle learns it here, whoever ended the session: the
		// waits of the calls it did not answer end, and it says it
		// ended, so that the edge's table of live sessions takes it for
		// gone (Session.Ended). A grain the cluster stopped (its identity
		// moved to a node that came back) stayed there once, and every
		// later request for the session, once it came back here, was
		// answered cancelled by the dead handle instead of opening the
		// session again (TestClusterNodeCycles).
		s.handle.stopped1()
	}
}

// onStopping ends a session stopped before it ended itself (StopAll past
// its grace, the actor system's end): closeUp, its file final after the
// actor is gone.
func (s *session) onStopping(ctx actor.Context) {
	if !s.closing {
		s.closeUp(ctx, nil)
	}
}

// closeUp ends the session: the process or the client is going away, or
// the session was closed. Every turn ends cancelled, and so does any that
// arrives until the actor is gone; children are stopped by the actor
// system as it stops. What the session's commands left running
// (background jobs, processes that left the group) is killed too. With
// self, the actor stops once its file is final (stopPersistence).
func (s *session) closeUp(ctx actor.Context, self *actor.PID) {
	s.closing = true
	defer s.removeTemp()
	s.onCancel(ctx, &CancelTurns{UpTo: ^uint64(0)})
	if t := s.cur; t != nil && s.held == nil {
		s.finish(ctx, t, acp.StopReasonCancelled, "")
	}
	if h := s.held; h != nil {
		// The writer flushes the file on its own; the reply goes now.
		s.held = nil
		s.answer(h.answer, h.res)
	}
	s.stopPersistence(self)
	s.settled()
	if pool := s.agents; pool != nil {
		s.rt.goWork(pool.Close)
	}
	if m := s.mcp; m != nil {
		s.rt.goWork(m.Close)
	}
	if l := s.lsp; l != nil {
		s.rt.goWork(l.Close)
	}
	if !s.ranCommands {
		return
	}
	id, log := s.id, s.rt.log
	s.rt.goWork(func() {
		if n := procs.KillSession(id); n > 0 {
			log.Info(fmt.Sprintf("[acp] session %s: killed %d process(es) its commands left running", id, n))
		}
	})
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
	why := fmt.Sprintf("mm failed: %v", r)
	s.rt.log.Error(fmt.Sprintf("[acp] session %s: turn failed: %s", s.id, why))
	s.reply(t, &TurnResult{Err: why})
	s.cur = nil
	s.next(ctx)
}

// answer answers request r through the connection the session is attached
// to.
func (s *session) answer(r Reply, res any) {
	s.out.Answer(s.id, r, res)
}

// announce queues available_commands_update, once.
func (s *session) announce() {
	if s.announced {
		return
	}
	s.announced = true
	s.tellNotice()
	s.noticeUnconfined()
	s.out.Update(s.id, acp.SessionUpdate{AvailableCommandsUpdate: &acp.SessionAvailableCommandsUpdate{
		AvailableCommands: Commands(s.skills, s.agents != nil),
	}})
}

// say streams one line from the agent to the client.
func (s *session) say(text string) {
	s.out.Update(s.id, acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{
		Content: acp.TextBlock(text),
	}})
}

// warn tells the user n: as a notice update to a client that shows them
// (session.notices), else as the seed's "⚠️ …" line of agent text.
func (s *session) warn(n Notice) {
	if s.client.Caps(s.id).Has(CapNotices) {
		s.out.UpdateRaw(s.id, NoticeUpdate(n))
		return
	}
	line := n.Title
	if n.Description != "" {
		line += ": " + n.Description
	}
	s.say("⚠️ " + line + "\n")
}

// start starts what the session runs: its model warmed, its writer, its
// MCP servers.
func (s *session) start(ctx actor.Context) {
	s.rt.warm(s.modelID)
	s.startPersistence(ctx)
	s.startMCP(ctx, s.mcpServers)
	s.logPolicy()
}

// idle says whether the session has no turn running, held or queued.
func (s *session) idle() bool { return s.cur == nil && s.held == nil && len(s.queue) == 0 }
