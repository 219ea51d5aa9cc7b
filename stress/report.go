package stress

import (
	"fmt"
	"io"
	"strings"
)

// Report is what a run measured. Its JSON form is the machine report of
// `mmstress -json`.
type Report struct {
	Config      Config  `json:"config"`
	Mode        string  `json:"mode"`
	Sessions    int     `json:"sessions"`
	Connections int     `json:"connections"`
	Turns       int64   `json:"turns"`
	Updates     int64   `json:"updates"` // session/update notifications received
	Elapsed     float64 `json:"elapsed_sec"`
	TurnsPerSec float64 `json:"turns_per_sec"`
	// CPUPerTurn is the CPU time (user and system, µs) that what serves
	// the sessions used per turn over the turn phase: the subprocesses
	// (from /proc) or mm serve (from its /metrics); 0 in process.
	// HarnessCPUPerTurn is this process's, mm's included in process. CPU
	// time is what a busy shared machine changes least.
	CPUPerTurn        float64 `json:"cpu_us_per_turn,omitempty"`
	HarnessCPUPerTurn float64 `json:"harness_cpu_us_per_turn"`
	// Latency is a whole turn, prompt to response, for the turns that are
	// not cancelled; FirstChunk is prompt to first answer chunk;
	// CancelLatency is session/cancel to the cancelled response.
	Latency       Quantiles `json:"latency_ms"`
	FirstChunk    Quantiles `json:"first_chunk_ms"`
	CancelLatency Quantiles `json:"cancel_latency_ms"`
	Counts
	// The resident memory of what serves the sessions (Memory says where
	// it is read): before any connection (a served mm only), once every
	// connection is initialized, with every session open and idle, its
	// peak while the turns run (sampled, or the system's high-water mark
	// in process), and once every session is closed. Per connection is
	// (connected − start) / connections; per session (idle − connected) /
	// sessions.
	Memory           string `json:"memory_source"`
	RSSStart         int64  `json:"start_rss_bytes,omitempty"`
	RSSConnected     int64  `json:"connected_rss_bytes"`
	RSSIdle          int64  `json:"idle_rss_bytes"`
	PeakRSS          int64  `json:"peak_rss_bytes"`
	RSSAfterClose    int64  `json:"after_close_rss_bytes"`
	RSSPerConnection int64  `json:"rss_per_connection_bytes,omitempty"`
	RSSPerSession    int64  `json:"idle_rss_per_session_bytes"`
	HeapPerSession   int64  `json:"heap_per_session_bytes"`
	// GoroutinesAfterClose counts the goroutines left once every
	// connection is closed, more than before it opened: in this process,
	// or a served mm's (from its /metrics) beyond GoroutinesKept, those a
	// long-lived mm keeps for reuse by design (its pools' idle goroutines).
	GoroutinesAfterClose int `json:"goroutines_after_close"`
	GoroutinesKept       int `json:"goroutines_kept,omitempty"`
	ProcessesLeft        int `json:"processes_left"`
	// Grains is each cluster node's count of session grains with every
	// session open and idle (mm_cluster_grains; -1: not said).
	Grains []int `json:"session_grains_per_node,omitempty"`
	// Kill is what a run with -kill-node counted.
	Kill   *KillReport      `json:"kill_node,omitempty"`
	Errors map[string]int64 `json:"errors"`
	// Baseline is the JSON-RPC echo over pipes on the SDK's connection (the
	// stack mm serves on), RawEcho the hand-rolled one, when asked for.
	Baseline *EchoReport `json:"echo_baseline,omitempty"`
	RawEcho  *EchoReport `json:"raw_echo,omitempty"`
}

// OK says whether the run found nothing wrong: no update lost, duplicated,
// reordered or misdelivered, every request answered once, every stop
// reason as expected, no unexpected error, nothing left running; with
// -kill-node, no prompt lost and every session whose turn failed with the
// node going on.
func (r *Report) OK() bool {
	unexpected := int64(0)
	for k, n := range r.Errors {
		if !strings.HasPrefix(k, "expected: ") {
			unexpected += n
		}
	}
	if k := r.Kill; k != nil && (k.Lost != 0 || k.NotResumed != 0) {
		return false
	}
	return r.Lost == 0 && r.Duplicated == 0 && r.OutOfOrder == 0 && r.Foreign == 0 && r.BadStop == 0 && r.ExtraAnswers == 0 &&
		unexpected == 0 && r.GoroutinesAfterClose == 0 && r.ProcessesLeft == 0
}

// Human writes the summary a person reads.
func (r *Report) Human(w io.Writer) {
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
	q := func(x Quantiles) string {
		if x.Count == 0 {
			return "—"
		}
		return fmt.Sprintf("p50 %.2f · p90 %.2f · p99 %.2f · max %.2f ms (%d)", x.P50, x.P90, x.P99, x.Max, x.Count)
	}
	concurrency := fmt.Sprint(r.Config.Concurrency)
	if r.Config.URL != "" && r.Config.Serve == "" {
		concurrency = "the server's"
	}
	fmt.Fprintf(w, "mmstress: %d sessions × %d turns, concurrency %s, %s\n", r.Sessions, r.Config.Turns, concurrency, r.Mode)
	fmt.Fprintf(w, "  turns        %d in %.2fs = %.0f turns/s (%d updates)\n", r.Turns, r.Elapsed, r.TurnsPerSec, r.Updates)
	if r.CPUPerTurn > 0 {
		fmt.Fprintf(w, "  cpu          mm %.0f µs/turn · harness %.0f µs/turn\n", r.CPUPerTurn, r.HarnessCPUPerTurn)
	} else if r.HarnessCPUPerTurn > 0 {
		fmt.Fprintf(w, "  cpu          %.0f µs/turn (mm and the harness, in this process)\n", r.HarnessCPUPerTurn)
	}
	fmt.Fprintf(w, "  latency      %s\n", q(r.Latency))
	fmt.Fprintf(w, "  first chunk  %s\n", q(r.FirstChunk))
	fmt.Fprintf(w, "  cancel       %s\n", q(r.CancelLatency))
	kb := func(b int64) string { return fmt.Sprintf("%.1f KB", float64(b)/1024) }
	fmt.Fprintf(w, "  memory       %s: ", r.Memory)
	if r.RSSStart > 0 {
		fmt.Fprintf(w, "RSS %s, %d connection(s) %s (%s each), ", mb(r.RSSStart), r.Connections, mb(r.RSSConnected), kb(r.RSSPerConnection))
	} else {
		fmt.Fprintf(w, "RSS %s, ", mb(r.RSSConnected))
	}
	fmt.Fprintf(w, "idle sessions %s (%s each", mb(r.RSSIdle), kb(r.RSSPerSession))
	if r.HeapPerSession > 0 {
		fmt.Fprintf(w, ", heap %s", kb(r.HeapPerSession))
	}
	fmt.Fprintf(w, "), peak %s, after close %s\n", mb(r.PeakRSS), mb(r.RSSAfterClose))
	if len(r.Grains) > 0 {
		fmt.Fprintf(w, "  grains       sessions per node, idle: %v\n", r.Grains)
	}
	if k := r.Kill; k != nil {
		fmt.Fprintf(w, "  kill -9      node %d after %.2fs; answered %d, failed %d (node lost), lost %d; first node-lost error after %.0f ms; "+
			"re-activation (first answered turn of a lost session after the kill) %.0f ms; sessions resumed %d, not %d\n",
			k.Node, k.After, k.Answered, k.Failed, k.Lost, k.FirstFailure, k.Reactivation, k.Resumed, k.NotResumed)
	}
	fmt.Fprintf(w, "  checks       lost %d · duplicated %d · out of order %d · foreign %d · bad stop %d · extra answers %d\n",
		r.Lost, r.Duplicated, r.OutOfOrder, r.Foreign, r.BadStop, r.ExtraAnswers)
	kept := ""
	if r.GoroutinesKept > 0 {
		kept = fmt.Sprintf(" (and %d kept for reuse)", r.GoroutinesKept)
	}
	fmt.Fprintf(w, "  after close  goroutines +%d%s · processes left %d\n", r.GoroutinesAfterClose, kept, r.ProcessesLeft)
	if b := r.Baseline; b != nil {
		fmt.Fprintf(w, "  baseline     JSON-RPC echo on the SDK over pipes %.0f requests/s → mm reaches %.0f%% of it\n", b.RequestsPerS, 100*r.TurnsPerSec/b.RequestsPerS)
	}
	if b := r.RawEcho; b != nil {
		fmt.Fprintf(w, "  floor        hand-rolled echo over pipes %.0f requests/s (%.0f%%)\n", b.RequestsPerS, 100*r.TurnsPerSec/b.RequestsPerS)
	}
	for _, k := range sortedKeys(r.Errors) {
		fmt.Fprintf(w, "  error        %6d × %s\n", r.Errors[k], k)
	}
	if r.OK() {
		fmt.Fprintln(w, "  OK")
	} else {
		fmt.Fprintln(w, "  FAILED")
	}
}
