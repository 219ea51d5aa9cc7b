package actors

import (
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
)

// usageTotals are a session's token counts, as the model server reported
// them.
type usageTotals struct {
	reported                            bool
	input, output, thought, cachedRead  int
	thoughtReported, cachedReadReported bool
}

func (s *session) usageUpdate(used int) {
	s.out.Update(s.id, acp.SessionUpdate{UsageUpdate: &acp.SessionUsageUpdate{
		Used: used,
		Size: s.rt.windowFor(s.modelID),
	}})
}

// estimate guesses the history's size in tokens (four bytes a token) for
// servers that report nothing.
func (s *session) estimate() int { return history.Estimate(s.history) }

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
