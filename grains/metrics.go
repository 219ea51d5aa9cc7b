package grains

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the cluster's figures on /metrics.
type metrics struct {
	requests *prometheus.CounterVec
	latency  prometheus.Histogram
	placed   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, m *Member) *metrics {
	x := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm_cluster_requests_total", Help: "Requests this node sent to a grain on another node, by outcome (ok, error).",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mm_cluster_request_seconds", Help: "Time from sending a request to a grain on another node to its answer.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		placed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm_cluster_sessions_placed_total", Help: "Sessions this node's clients opened, by where their ids place them: here (drawn to live on this node: cluster.placement local, or balanced within this node's share) or any (spread).",
		}, []string{"where"}),
	}
	members := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mm_cluster_members", Help: "Live members of the cluster as this node sees them, itself included once joined.",
	}, func() float64 { return float64(len(m.Members())) })
	streamed := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "mm_cluster_stream_outs_total", Help: "Messages taken from this node's stream, not through the remote: what sessions on other nodes wrote for this node's clients, and prompts sent straight to its sessions.",
	}, func() float64 {
		if m.stream == nil {
			return 0
		}
		return float64(m.stream.in.Load())
	})
	reg.MustRegister(members, streamed, x.requests, x.latency, x.placed, grainsCollector{m})
	x.requests.WithLabelValues("ok")
	x.requests.WithLabelValues("error")
	x.placed.WithLabelValues("here")
	x.placed.WithLabelValues("any")
	return x
}

// grainsCollector reports the grains active on this node, by kind, as
// protoactor counts them: its identity lookup counts an activation when it
// spawns a grain and takes it back when the grain stops, whatever stopped
// it.
type grainsCollector struct{ m *Member }

var grainsDesc = prometheus.NewDesc("mm_cluster_grains", "Grains active on this node, by kind.", []string{"kind"}, nil)

func (g grainsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- grainsDesc }

func (g grainsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range g.m.kinds {
		n := 0.0
		if ak, ok := g.m.c.TryGetClusterKind(k); ok {
			n = float64(ak.Count())
		}
		ch <- prometheus.MustNewConstMetric(grainsDesc, prometheus.GaugeValue, n, k)
	}
}

// CrossNodeRequest records a request to a grain on another node: how long
// it took, and whether it failed (err != nil). It may be called from any
// goroutine; it does nothing when Start was given no Registry.
func (m *Member) CrossNodeRequest(d time.Duration, err error) {
	if m.metrics == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.metrics.requests.WithLabelValues(outcome).Inc()
	m.metrics.latency.Observe(d.Seconds())
}
