package stress

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// Counts are the checker's findings; every field but Turns must be 0 for a
// correct run, except Errors for the turns the model was told to fail.
type Counts struct {
	Lost       int64 `json:"lost_updates"`
	Duplicated int64 `json:"duplicated_updates"`
	OutOfOrder int64 `json:"out_of_order_updates"`
	// Foreign counts updates and permission requests that reached a session
	// or turn they do not belong to.
	Foreign int64 `json:"foreign_updates"`
	// BadStop counts turns that ended with another stop reason than their
	// kind calls for (a cancel not answered cancelled, …).
	BadStop int64 `json:"bad_stop_reasons"`
	// ExtraAnswers counts the responses to a request that was already
	// answered (or never sent): every request is answered exactly once.
	ExtraAnswers int64 `json:"extra_answers"`
}

func (c *Counts) add(o Counts) {
	c.Lost += o.Lost
	c.Duplicated += o.Duplicated
	c.OutOfOrder += o.OutOfOrder
	c.Foreign += o.Foreign
	c.BadStop += o.BadStop
	c.ExtraAnswers += o.ExtraAnswers
}

// tracker checks the updates of one session. A session runs one turn at a
// time, so every update belongs to the current turn.
type tracker struct {
	mu      sync.Mutex
	id      string
	prompt  string // the current turn's prompt ("" between turns)
	kind    kind
	started time.Time
	first   time.Duration // time to the first answer chunk, 0 before it
	text    strings.Builder
	calls   map[string]string // tool call id → its last status
	running chan struct{}     // closed when a tool call of the turn goes in_progress
	asked   int
	counts  Counts
	updates int64 // notifications received
	// failedByKill: the session's last turn failed with its node (-kill-node);
	// its next turn must be answered. Only the session's goroutine reads it.
	failedByKill bool
}

func (t *tracker) begin(k kind, prompt string) {
	t.mu.Lock()
	t.prompt, t.kind, t.started, t.first = prompt, k, time.Now(), 0
	t.text.Reset()
	t.calls = map[string]string{}
	t.running = make(chan struct{})
	t.asked = 0
	t.mu.Unlock()
}

var statusRank = map[string]int{"pending": 0, "in_progress": 1, "completed": 2, "failed": 2}

func (t *tracker) update(u *update) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.updates++
	if t.prompt == "" {
		// Between turns only the session's own announcements may come.
		switch u.Kind {
		case "available_commands_update", "usage_update", "current_mode_update":
		default:
			t.counts.Foreign++
		}
		return
	}
	switch u.Kind {
	case "unreadable":
		t.counts.Lost++
	case "agent_message_chunk":
		if c, ok := u.text(); ok {
			if t.first == 0 {
				t.first = time.Since(t.started)
			}
			t.text.WriteString(c)
		}
	case "tool_call":
		if _, seen := t.calls[u.ToolCallID]; seen {
			t.counts.Duplicated++
		}
		t.calls[u.ToolCallID] = u.Status
	case "tool_call_update":
		prev, seen := t.calls[u.ToolCallID]
		if !seen {
			t.counts.Foreign++ // an update for a call this turn never announced
			return
		}
		if st := u.Status; st != "" {
			switch {
			case statusRank[st] < statusRank[prev]:
				t.counts.OutOfOrder++
			case st == prev:
				t.counts.Duplicated++
			}
			t.calls[u.ToolCallID] = st
			if st == "in_progress" {
				select {
				case <-t.running:
				default:
					close(t.running)
				}
			}
		}
	}
}

// permission checks that a request belongs to this session's current turn.
func (t *tracker) permission(callID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.calls[callID]; !ok || t.kind != kindAsk {
		t.counts.Foreign++
		return false
	}
	t.asked++
	return true
}

// abort closes a turn that failed with its node, or was never answered:
// what it received is not checked, and whatever comes for it later is
// foreign.
func (t *tracker) abort() {
	t.mu.Lock()
	t.prompt = ""
	t.mu.Unlock()
}

// end closes the turn and checks what it received against what its kind
// and prompt call for.
func (t *tracker) end(stop string, err error, words int) (ttfc time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	want := "end_turn"
	switch t.kind {
	case kindCancel:
		want = "cancelled"
	case kindFail:
		want = ""
	}
	if (err != nil) != (t.kind == kindFail) || (err == nil && stop != want) {
		t.counts.BadStop++
	}
	if t.kind != kindCancel && t.kind != kindFail {
		t.counts.add(checkText(t.text.String(), t.prompt, words))
		for _, st := range t.calls {
			if st != "completed" {
				t.counts.Lost++ // the call's final update never came
			}
		}
		if t.kind == kindAsk && t.asked != 1 {
			t.counts.Lost++
		}
	}
	t.prompt = ""
	return t.first
}

// checkText compares an answer with "re: <prompt> w1 … wN".
func checkText(got, prompt string, n int) (c Counts) {
	want := "re: " + prompt + words(n)
	if got == want {
		return c
	}
	if got == "" {
		c.Lost += int64(n) // the answer never came
		return c
	}
	f := strings.Fields(got)
	head := 1 + len(strings.Fields(prompt)) // "re:", then the prompt's words
	if len(f) < head || strings.Join(f[1:head], " ") != prompt {
		c.Foreign++ // another turn's or session's answer
		if len(f) < head {
			return c
		}
	}
	seen := make([]int, n+1)
	last := 0
	for _, w := range f[head:] {
		i, err := strconv.Atoi(strings.TrimPrefix(w, "w"))
		if err != nil || i < 1 || i > n {
			c.Foreign++
			continue
		}
		seen[i]++
		if i < last {
			c.OutOfOrder++
		}
		last = i
	}
	for i := 1; i <= n; i++ {
		switch {
		case seen[i] == 0:
			c.Lost++
		case seen[i] > 1:
			c.Duplicated += int64(seen[i] - 1)
		}
	}
	return c
}

// client routes every notification and permission request to its
// session's tracker.
type client struct {
	mu       sync.RWMutex
	sessions map[string]*tracker
	unknown  Counts
}

func newClient() *client { return &client{sessions: map[string]*tracker{}} }

func (c *client) add(t *tracker) {
	c.mu.Lock()
	c.sessions[t.id] = t
	c.mu.Unlock()
}

func (c *client) get(id string) *tracker {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.sessions[id]
}

func (c *client) foreign() {
	c.mu.Lock()
	c.unknown.Foreign++
	c.mu.Unlock()
}

func (c *client) update(sessionID string, u *update) {
	t := c.get(sessionID)
	if t == nil {
		// available_commands_update may race session/new's answer; any
		// other update for an unknown session is foreign.
		if u.Kind != "available_commands_update" {
			c.foreign()
		}
		return
	}
	t.update(u)
}

// permission allows a request that belongs to its session's current turn.
func (c *client) permission(sessionID, callID string) string {
	t := c.get(sessionID)
	if t == nil {
		c.foreign()
		return ""
	}
	if !t.permission(callID) {
		return ""
	}
	return "allow"
}
