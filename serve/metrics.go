package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the transport's own figures on /metrics. The registry they
// live in is Server.Registry: the runtime behind the Connector registers
// its own there (sessions, turns, tools, tokens, retries).
type metrics struct {
	open    *prometheus.GaugeVec
	total   *prometheus.CounterVec
	refused *prometheus.CounterVec
	resumed prometheus.Counter
	// forwarded counts the requests passed on to the node that holds
	// their connection, by outcome (forwarded, gone, unreachable).
	forwarded *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, in *incoming) *metrics {
	m := &metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mm_connections_open", Help: "ACP connections open, by transport.",
		}, []string{"transport"}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm_connections_total", Help: "ACP connections opened since start, by transport.",
		}, []string{"transport"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm_requests_refused_total", Help: "HTTP requests and upgrades refused before any ACP was read, by reason (token, origin, limit, draining, unready, resume).",
		}, []string{"reason"}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mm_connections_resumed_total", Help: "WebSocket connections resumed on a new socket after theirs dropped.",
		}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm_requests_forwarded_total", Help: "Requests for a connection another node of the cluster holds, by outcome: forwarded to it, gone (no such live node), unreachable.",
		}, []string{"outcome"}),
	}
	// Both transports show from the start, at 0.
	for _, t := range []string{WebSocket, HTTP} {
		m.open.WithLabelValues(t)
		m.total.WithLabelValues(t)
	}
	reg.MustRegister(m.open, m.total, m.refused, m.resumed, m.forwarded, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mm_incoming_bytes", Help: "Bytes of client messages being read, of serve.maxIncomingBytes.",
	}, func() float64 { return float64(in.held.Load()) }))
	return m
}

// NewRegistry is the registry of a server that was given none: the
// transport's metrics, the Go runtime's and the process's (memory, CPU,
// open files).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
