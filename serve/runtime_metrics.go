package serve

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RuntimeMetrics are the figures of the runtime behind the Connector on
// /metrics: sessions open, turns by stop reason and their duration, tool
// calls by tool and status, model tokens, model retries. It has the
// methods of actors.Metrics, which the runtime calls from its actors: each
// only counts, never blocks.
type RuntimeMetrics struct {
	turns    *prometheus.CounterVec
	duration prometheus.Histogram
	tools    *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	retries  prometheus.Counter
}

// NewRuntimeMetrics registers the runtime's metrics on reg; sessions says
// how many sessions are open.
func NewRuntimeMetrics(reg prometheus.Registerer, sessions func() int) *RuntimeMetrics {
	m := &RuntimeMetrics{
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm_turns_total", Help: "Prompt turns ended, by stop reason (end_turn, cancelled, max_tokens, max_turn_requests, error).",
		}, []string{"stop_reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mm_turn_duration_seconds", Help: "Time from a prompt's arrival in its session to its turn's end.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600},
		}),
		tools: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm_tool_calls_total", Help: "Tool calls ended, by tool and status (completed, failed).",
		}, []string{"tool", "status"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm_model_tokens_total", Help: "Model tokens the servers reported, by direction (input, output).",
		}, []string{"direction"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mm_model_retries_total", Help: "Model calls tried again after the server refused them or was away.",
		}),
	}
	reg.MustRegister(m.turns, m.duration, m.tools, m.tokens, m.retries,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mm_sessions_open", Help: "Live sessions, held by a connection or not."},
			func() float64 { return float64(sessions()) }))
	for _, d := range []string{"input", "output"} {
		m.tokens.WithLabelValues(d)
	}
	return m
}

// TurnEnded counts a turn and its duration.
func (m *RuntimeMetrics) TurnEnded(stop string, d time.Duration) {
	m.turns.WithLabelValues(stop).Inc()
	m.duration.Observe(d.Seconds())
}

// ToolCall counts a tool call.
func (m *RuntimeMetrics) ToolCall(tool, status string) { m.tools.WithLabelValues(tool, status).Inc() }

// Tokens counts a model call's tokens.
func (m *RuntimeMetrics) Tokens(input, output int) {
	m.tokens.WithLabelValues("input").Add(float64(input))
	m.tokens.WithLabelValues("output").Add(float64(output))
}

// Retry counts a model call tried again.
func (m *RuntimeMetrics) Retry() { m.retries.Inc() }
