package actors

import (
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

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

// split returns how many messages (after the system prompt) lie before the
// last keep turns, and the index where the kept part starts.
func (s *session) split(keep int) (older, cut int) {
	var starts []int
	for i := 1; i < len(s.history); i++ {
		if m := &s.history[i]; m.Role == llm.RoleUser && !m.Summary {
			starts = append(starts, i)
		}
	}
	if len(starts) <= keep {
		return 0, len(s.history)
	}
	cut = len(s.history)
	if keep > 0 {
		cut = starts[len(starts)-keep]
	}
	return cut - 1, cut
}

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
	const system = "You compress conversations between a user and a coding agent so that the agent can go on with the work. Keep every fact it will need: goals, decisions, file paths, commands run and their outcomes, errors, what is left to do. Write plain text, no preamble."
	const ask = CompactPrompt + " in at most a few hundred words.\n\n"
	limit := 0 // no cap: the window is unknown
	if l := s.requestLimit(); l > 0 {
		limit = max(l-len(system)-len(ask)-8, 1)
	}
	req := llm.Request{
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: system},
			{Role: llm.RoleUser, Content: ask + transcript(s.history[1:cut], limit)},
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
		return
	}
	var line string
	switch summary := strings.TrimSpace(m.Response.Text); {
	case m.Err != "" || summary == "":
		why := m.Err
		if why == "" {
			why = "the model wrote an empty summary"
		}
		line = "[compact: failed, history kept: " + why + "]"
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
		h := make([]llm.Message, 0, 2+kept)
		h = append(h, s.history[0], llm.Message{Role: llm.RoleUser, Content: summary, Summary: true})
		s.history = append(h, s.history[t.cut:]...)
		s.lastUsed = 0 // the history changed: the last measure no longer holds
		s.prov.CompressionDepth++
		if t.auto {
			t.histStart = len(s.history) - 1 // the current question is the last message
		}
		line = fmt.Sprintf("🗜️ compressed %d messages → 1 summary + %d kept (%d tokens, %.1fs)",
			compressed, kept, s.estimate(), time.Since(t.started).Seconds())
	}
	if t.auto {
		s.say(line + "\n\n")
		s.rt.log.Info(fmt.Sprintf("[acp] session %s: auto-compact — %s", s.id, line))
		t.auto = false
		s.callModel(ctx, t)
		return
	}
	s.compactLine(line)
	s.finish(ctx, t, acp.StopReasonEndTurn, "")
}

// transcript renders messages as text for the summariser, in at most
// limit bytes (0: no limit): the newest messages that fit, after a line
// counting the oldest ones left out. Tool outputs are cut: the summary
// needs their gist, not their bulk.
func transcript(msgs []llm.Message, limit int) string {
	const maxTool = 2000
	from := 0
	if limit > 0 {
		used := 0
		for from = len(msgs); from > 0; from-- {
			m := &msgs[from-1]
			n := len(m.Content) + 32
			if m.Role == llm.RoleTool {
				n = min(n, maxTool+64)
			}
			for _, c := range m.ToolCalls {
				n += len(c.Name) + len(c.Arguments) + 12
			}
			if used+n > limit-200 {
				break
			}
			used += n
		}
	}
	var b strings.Builder
	if from > 0 {
		fmt.Fprintf(&b, "[the %d oldest messages are left out: they do not fit the model's context window]\n\n", from)
	}
	for i := from; i < len(msgs); i++ {
		m := &msgs[i]
		switch {
		case m.Summary:
			b.WriteString("EARLIER SUMMARY:\n")
		case m.Role == llm.RoleUser:
			b.WriteString("USER:\n")
		case m.Role == llm.RoleAssistant:
			b.WriteString("ASSISTANT:\n")
		case m.Role == llm.RoleTool:
			b.WriteString("TOOL RESULT (" + m.Name + "):\n")
		}
		content := m.Content
		if m.Role == llm.RoleTool && len(content) > maxTool {
			content = content[:maxTool] + fmt.Sprintf("\n[… %d more bytes]", len(content)-maxTool)
		}
		b.WriteString(content)
		for _, c := range m.ToolCalls {
			b.WriteString("\nTOOL CALL " + c.Name + " " + c.Arguments)
		}
		b.WriteString("\n\n")
	}
	return b.String()
}
