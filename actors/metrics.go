package actors

import "time"

// Metrics is told what the runtime does, for a server's /metrics. Its
// methods are called from actors' Receive: they must not block (a
// Prometheus counter or histogram does not).
type Metrics interface {
	// TurnEnded: a prompt's turn ended, with its stop reason ("end_turn",
	// "cancelled", "max_tokens", "max_turn_requests", …, or "error"),
	// after d from its arrival in its session.
	TurnEnded(stop string, d time.Duration)
	// ToolCall: a tool call ended, "completed" or "failed".
	ToolCall(tool, status string)
	// Tokens: a model call reported its usage.
	Tokens(input, output int)
	// Retry: a model call is tried again (the server was busy or away).
	Retry()
}

// noMetrics is the Metrics of a runtime given none.
type noMetrics struct{}

func (noMetrics) TurnEnded(string, time.Duration) {}
func (noMetrics) ToolCall(string, string)         {}
func (noMetrics) Tokens(int, int)                 {}
func (noMetrics) Retry()                          {}

// turnEnded tells the metrics how turn t ended.
func (s *session) turnEnded(t *turn, res *TurnResult) {
	stop := string(res.StopReason)
	if res.Err != "" {
		stop = "error"
	}
	s.rt.metrics.TurnEnded(stop, time.Since(t.arrived))
}
