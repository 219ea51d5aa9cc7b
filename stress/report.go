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
	Turns       int64   `json:"turns"`
	Updates     int64   `json:"updates"` // session/update notifications received
	Elapsed     float64 `json:"elapsed_sec"`
	TurnsPerSec float64 `json:"turns_per_sec"`
	// Latency is a whole turn, prompt to response, for the turns that are
	// not cancelled; FirstChunk is prompt to first answer chunk;
	// CancelLatency is session/cancel to the cancelled response.
	Latency       Quantiles `json:"latency_ms"`
	FirstChunk    Quantiles `json:"first_chunk_ms"`
	CancelLatency Quantiles `json:"cancel_latency_ms"`
	Counts
	PeakRSS              int64            `json:"peak_rss_bytes"`
	RSSIdle              int64            `json:"idle_rss_bytes"`
	RSSPerSession        int64            `json:"idle_rss_per_session_bytes"`
	HeapPerSession       int64            `json:"heap_per_session_bytes"`
	GoroutinesAfterClose int              `json:"goroutines_after_close"`
	ProcessesLeft        int              `json:"processes_left"`
	Errors               map[string]int64 `json:"errors"`
	// Baseline is the JSON-RPC echo over pipes on the SDK's connection (the
	// stack mm serves on), RawEcho the hand-rolled one, when asked for.
	Baseline *EchoReport `json:"echo_baseline,omitempty"`
	RawEcho  *EchoReport `json:"raw_echo,omitempty"`
}

// OK says whether the run found nothing wrong: no update lost, duplicated,
// reordered or misdelivered, every stop reason as expected, no unexpected
// error, nothing left running.
func (r *Report) OK() bool {
	unexpected := int64(0)
	for k, n := range r.Errors {
		if !strings.HasPrefix(k, "expected: ") {
			unexpected += n
		}
	}
	return r.Lost == 0 && r.Duplicated == 0 && r.OutOfOrder == 0 && r.Foreign == 0 && r.BadStop == 0 &&
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
	fmt.Fprintf(w, "mmstress: %d sessions × %d turns, concurrency %d, %s\n", r.Sessions, r.Config.Turns, r.Config.Concurrency, r.Mode)
	fmt.Fprintf(w, "  turns        %d in %.2fs = %.0f turns/s (%d updates)\n", r.Turns, r.Elapsed, r.TurnsPerSec, r.Updates)
	fmt.Fprintf(w, "  latency      %s\n", q(r.Latency))
	fmt.Fprintf(w, "  first chunk  %s\n", q(r.FirstChunk))
	fmt.Fprintf(w, "  cancel       %s\n", q(r.CancelLatency))
	fmt.Fprintf(w, "  memory       peak RSS %s · idle RSS %s (%.1f KB/session)", mb(r.PeakRSS), mb(r.RSSIdle), float64(r.RSSPerSession)/1024)
	if r.HeapPerSession > 0 {
		fmt.Fprintf(w, " · heap %.1f KB/session", float64(r.HeapPerSession)/1024)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  checks       lost %d · duplicated %d · out of order %d · foreign %d · bad stop %d\n",
		r.Lost, r.Duplicated, r.OutOfOrder, r.Foreign, r.BadStop)
	fmt.Fprintf(w, "  after close  goroutines +%d · processes left %d\n", r.GoroutinesAfterClose, r.ProcessesLeft)
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
