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
)

// Compression replaces the turns older than the last K with one summary the
// model writes. It runs inside a turn slot: for /compact, or automatically
// before a turn's first model call once the history passes
// context.threshold of the context window.

// compactDone ends a compression call.
type compactDone struct {
	Turn     uint64
	Response llm.Response
	Err      string
}

// CompactPrompt opens the request that asks for a summary; scripts for the
// scripted model match on it.
const CompactPrompt = "Summarise the conversation below"

// compactSystem is the system message of a compaction call.
const compactSystem = "You write the hand-off summary of a conversation between a user and a coding agent, so that another agent can carry on the work from it alone. Keep every fact that work needs; write plain Markdown, with no preamble."

// compactRequest is the request for a summary (configs/compact.md): the
// sections to write, the plan to carry over, and a length budget of a
// tenth of the model's window (between 300 and 3,000 words; 1,500 when
// the window is unknown).
func compactRequest(plan []history.PlanEntry, window int) string {
	words := 1500
	if window > 0 {
		words = min(max(window/10*3/4, 300), 3000)
	}
	var p strings.Builder
	if len(plan) > 0 {
		p.WriteString("The agent's current plan, to carry over under In progress and Next steps with each step's status:\n")
		for _, e := range plan {
			fmt.Fprintf(&p, "- [%s] %s\n", e.Status, e.Content)
		}
		p.WriteString("\n")
	}
	r := strings.ReplaceAll(configs.CompactRequest(), "{{plan}}", p.String())
	return strings.TrimRight(strings.ReplaceAll(r, "{{words}}", fmt.Sprint(words)), "\n")
}

// split is history.Split of the session's history.
func (s *session) split(keep int) (older, cut int) { return history.Split(s.history, keep) }

// compactionDue says whether the turn starting now compresses the history
// first: it has outgrown its share of the context window and has turns to
// spare (the current one is always kept). After N automatic compressions
// in a row failed, the next N turns do not try: a server that cannot
// summarise is not asked before every turn, each time with the whole
// history (the window cap keeps those turns' requests in bounds).
func (s *session) compactionDue() bool {
	if s.compactWait > 0 {
		s.compactWait--
		return false
	}
	window := s.rt.windowFor(s.modelID)
	if window <= 0 {
		return false
	}
	used := max(s.lastUsed, s.estimate()+s.toolChars()/4)
	if float64(used) <= s.rt.cfg.Context.Threshold*float64(window) {
		return false
	}
	older, _ := s.split(max(s.rt.cfg.Context.KeepLastTurns, 1))
	return older > 0
}

// startCompaction spawns the model call that writes the summary.
func (s *session) startCompaction(ctx actor.Context, t *turn) {
	keep := s.rt.cfg.Context.KeepLastTurns
	if t.auto {
		keep = max(keep, 1)
	}
	_, cut := s.split(keep)
	t.cut = cut
	t.started = time.Now()
	if s.client.Caps(s.id).Has(CapCompaction) {
		s.compactions++
		t.compactionID = fmt.Sprintf("compaction-%d", s.compactions)
		s.out.UpdateRaw(s.id, CompactionUpdate(t.compactionID, "in_progress", "", ""))
	}
	ask := compactRequest(s.plan, s.rt.windowFor(s.modelID))
	limit := 0 // no cap: the window is unknown
	if l := s.requestLimit(); l > 0 {
		limit = max(l-len(compactSystem)-len(ask)-8, 1)
	}
	req := llm.Request{
		Messages: []history.Message{
			{Role: history.RoleSystem, Content: compactSystem},
			{Role: history.RoleUser, Content: ask + "\n\n" + history.Transcript(s.history[1:cut], limit)},
		},
		MaxTokens:   s.rt.cfg.Model.MaxTokens,
		Temperature: s.rt.cfg.Model.Temperature,
	}
	s.runModel(ctx, t, &runModel{Turn: t.id, Model: s.modelID, Req: req, Compact: true})
}

func (s *session) onCompactDone(ctx actor.Context, m *compactDone) {
	t := s.cur
	if t == nil || t.id != m.Turn {
		return
	}
	if s.settle(ctx, t, "model") {
		if t.compactionID != "" {
			s.out.UpdateRaw(s.id, CompactionUpdate(t.compactionID, "cancelled", "", ""))
			t.compactionID = ""
		}
		return
	}
	var line, update string
	var summaryText, failure string
	switch summary := strings.TrimSpace(m.Response.Text); {
	case m.Err != "" || summary == "":
		why := m.Err
		if why == "" {
			why = "the model wrote an empty summary"
		}
		line = "[compact: failed, history kept: " + why + "]"
		update, failure = "failed", why
		if t.auto {
			s.compactFails++
			s.compactWait = s.compactFails
			line = fmt.Sprintf("[compact: failed, history kept: %s; not tried again for %d turn(s)]", why, s.compactWait)
		}
	default:
		s.compactFails, s.compactWait = 0, 0
		if u := m.Response.Usage; u != nil {
			s.usage.add(u)
		}
		compressed, kept := t.cut-1, len(s.history)-t.cut
		s.history = history.Compacted(s.history, t.cut, summary)
		s.sys.shown = nil // the results that showed subfolders' instructions may be gone
		s.lastUsed = 0    // the history changed: the last measure no longer holds
		s.prov.CompressionDepth++
		if t.auto {
			t.histStart = len(s.history) - 1 // the current question is the last message
		}
		line = fmt.Sprintf("🗜️ compressed %d messages → 1 summary + %d kept (%d tokens, %.1fs)",
			compressed, kept, s.estimate(), time.Since(t.started).Seconds())
		update, summaryText = "completed", summary
	}
	// A client that shows compactions gets the compaction's end as an
	// update, with its summary; the others the seed's line of text.
	told := t.compactionID != ""
	if told {
		s.out.UpdateRaw(s.id, CompactionUpdate(t.compactionID, update, summaryText, failure))
		t.compactionID = ""
	}
	if t.auto {
		if !told {
			s.say(line + "\n\n")
		}
		s.rt.log.Info(fmt.Sprintf("[acp] session %s: auto-compact — %s", s.id, line))
		t.auto = false
		s.callModel(ctx, t)
		return
	}
	if told {
		s.rt.log.Info(fmt.Sprintf("[acp] session %s: /compact — %s", s.id, line))
	} else {
		s.compactLine(line)
	}
	s.finish(ctx, t, acp.StopReasonEndTurn, "")
}
