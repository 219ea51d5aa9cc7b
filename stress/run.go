package stress

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/coder/acp-go-sdk"
	"github.com/schollz/progressbar/v3"
)

func contextBackground() context.Context { return context.Background() }

// hist records durations in microseconds, from 1 µs to 10 minutes, with
// three significant digits.
type hist struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newHist() *hist { return &hist{h: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)} }

func (h *hist) record(d time.Duration) {
	us := d.Microseconds()
	if us < 1 {
		us = 1
	}
	h.mu.Lock()
	_ = h.h.RecordValue(us)
	h.mu.Unlock()
}

// Run runs the harness and reports. It fails only when it cannot start the
// agents; what goes wrong during the run is counted in the report.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(c.Dir, "mmstress-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	var mb [6]byte
	_, _ = crand.Read(mb[:])
	marker := hex.EncodeToString(mb[:])
	inProcess := c.Procs == 0 && c.URL == "" && c.Serve == ""
	if inProcess {
		// Commands started in this process inherit it.
		os.Setenv(markerEnv, marker)
		defer os.Unsetenv(markerEnv)
	}
	var heap0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heap0)

	cl := newClient()
	errs := &errorKinds{m: map[string]int64{}}
	f, err := startFleet(ctx, &c, dir, marker, cl, errs)
	if err != nil {
		return nil, err
	}
	agents := f.agents
	r := &Report{Config: c, Mode: f.mode, Memory: f.memory, Sessions: c.Sessions, Connections: len(agents), RSSStart: f.rssStart}
	switch {
	case c.Persist && c.Store != "":
		r.Mode += ", sessions saved in postgres"
	case c.Persist:
		r.Mode += ", sessions saved in files"
	}
	for _, a := range agents {
		if err := a.conn.callJSON(ctx, "initialize", acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber,
			ClientInfo: &acp.Implementation{Name: "mmstress", Version: "1"}}, nil); err != nil {
			f.close()
			return nil, fmt.Errorf("initialize: %w", err)
		}
	}
	r.RSSConnected = f.rss()
	if r.RSSStart > 0 && r.RSSConnected > 0 {
		r.RSSPerConnection = (r.RSSConnected - r.RSSStart) / int64(len(agents))
	}

	// Open the sessions, a few at a time per agent.
	trackers := make([]*tracker, c.Sessions)
	owner := make([]*agent, c.Sessions)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range trackers {
		a := agents[i%len(agents)]
		owner[i] = a
		cwd := filepath.Join(dir, fmt.Sprintf("s%d", i))
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := os.Mkdir(cwd, 0o755); err != nil {
				errs.add("session/new", err)
				return
			}
			var res struct {
				SessionID string `json:"sessionId"`
			}
			if err := a.conn.callJSON(ctx, "session/new", acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}}, &res); err != nil {
				errs.add("session/new", err)
				return
			}
			t := &tracker{id: res.SessionID}
			cl.add(t)
			trackers[i] = t
		}(i)
	}
	wg.Wait()

	// Idle sessions: what each costs.
	var heap1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heap1)
	if inProcess {
		r.HeapPerSession = int64(heap1.HeapAlloc-min(heap1.HeapAlloc, heap0.HeapAlloc)) / int64(c.Sessions)
	}
	r.RSSIdle = f.rss()
	if f.grains != nil {
		r.Grains = f.grains()
	}
	if r.RSSIdle > 0 && r.RSSConnected > 0 {
		r.RSSPerSession = (r.RSSIdle - r.RSSConnected) / int64(c.Sessions)
	}

	// The turns: one goroutine per session, its turns one after another.
	lat, ttfc, cancelLat := newHist(), newHist(), newHist()
	var done atomic.Int64
	var bar *progressbar.ProgressBar
	total := c.Sessions * c.Turns
	if c.Progress && total > 0 {
		bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("turns"), progressbar.OptionSetDescription("mmstress"),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	peak := &peakRSS{}
	stopPeak := peak.watch(f)
	var cpu0 time.Duration
	if f.cpu != nil {
		cpu0 = f.cpu()
	}
	self0 := selfCPU()
	var kl *killer
	if c.KillNode > 0 {
		kl = startKiller(&c, f, errs)
	}
	start := time.Now()
	for i, t := range trackers {
		if t == nil {
			continue
		}
		wg.Add(1)
		go func(i int, t *tracker, a *agent) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(c.Seed, uint64(i)))
			for j := 0; (j < c.Turns || j == c.Turns && kl.owes(t)) && ctx.Err() == nil; j++ {
				k := pick(&c, rng.Float64())
				if j >= c.Turns {
					k = kindPing // one more, to show the session goes on
				}
				if runTurn(ctx, &c, a, t, k, fmt.Sprintf("%s s%d t%d", k, i, j), lat, ttfc, cancelLat, errs, kl) {
					break
				}
				if j < c.Turns {
					done.Add(1)
					if bar != nil {
						_ = bar.Add(1)
					}
				}
			}
		}(i, t, owner[i])
	}
	wg.Wait()
	elapsed := time.Since(start)
	if kl != nil {
		r.Kill = kl.report(errs)
	}
	self := selfCPU() - self0
	var cpu time.Duration
	if f.cpu != nil {
		cpu = f.cpu() - cpu0
	}
	stopPeak()
	if bar != nil {
		_ = bar.Finish()
	}

	r.Turns = done.Load()
	r.Elapsed = elapsed.Seconds()
	if elapsed > 0 {
		r.TurnsPerSec = float64(r.Turns) / elapsed.Seconds()
	}
	if r.Turns > 0 {
		r.CPUPerTurn = float64(cpu.Microseconds()) / float64(r.Turns)
		r.HarnessCPUPerTurn = float64(self.Microseconds()) / float64(r.Turns)
	}
	r.Latency = quantiles(lat)
	r.FirstChunk = quantiles(ttfc)
	r.CancelLatency = quantiles(cancelLat)
	r.PeakRSS = max(peak.max.Load(), r.RSSIdle)

	// Close every session, then the agents; nothing may be left.
	for i, t := range trackers {
		if t == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(a *agent, t *tracker) {
			defer func() { <-sem; wg.Done() }()
			if err := a.conn.callJSON(ctx, "session/close", acp.CloseSessionRequest{SessionId: acp.SessionId(t.id)}, nil); err != nil {
				errs.add("session/close", err)
			}
		}(owner[i], t)
	}
	wg.Wait()
	r.RSSAfterClose = f.rss()
	for _, a := range agents {
		if err := a.close(); err != nil {
			errs.add("exit", err)
		}
		r.Counts.ExtraAnswers += a.conn.extraAnswers()
	}
	if f.goroutinesLeft != nil {
		r.GoroutinesAfterClose, r.GoroutinesKept = f.goroutinesLeft()
	}
	if f.stop != nil {
		if err := f.stop(); err != nil {
			errs.add("exit", err)
		}
	}
	for _, t := range trackers {
		if t != nil {
			r.Counts.add(t.counts)
			r.Updates += t.updates
		}
	}
	r.Counts.add(cl.unknown)
	r.ProcessesLeft = len(leftovers(marker))
	r.Errors = errs.m
	return r, nil
}

// errorKinds counts errors by the call and the error's first words.
type errorKinds struct {
	mu sync.Mutex
	m  map[string]int64
}

func (e *errorKinds) add(call string, err error) {
	msg := err.Error()
	if f := strings.Fields(msg); len(f) > 6 {
		msg = strings.Join(f[:6], " ") + " …"
	}
	e.mu.Lock()
	e.m[call+": "+msg]++
	e.mu.Unlock()
}

// peakRSS samples the resident memory of what serves the sessions while
// the turns run (a subprocess's own high-water mark dies with it).
type peakRSS struct{ max atomic.Int64 }

func (p *peakRSS) watch(f *fleet) (stop func()) {
	read, every := f.rss, f.sample
	if f.hwm != nil {
		read = f.hwm
	}
	if every == 0 {
		every = 50 * time.Millisecond
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if n := read(); n > p.max.Load() {
				p.max.Store(n)
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

// windDown bounds the wait for goroutines to wind down once the run's
// connections have closed: far above the milliseconds it takes, so that a
// loaded machine is not taken for a leak; a real leak waits this long
// before it is counted.
const windDown = 30 * time.Second

// goroutinesLeft waits for goroutines to wind down, windDown at most, and
// returns how many more there are than before the run.
func goroutinesLeft(before int) int {
	deadline := time.Now().Add(windDown)
	for {
		n := runtime.NumGoroutine() - before
		if n <= 0 || time.Now().After(deadline) {
			return max(n, 0)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Quantiles of a latency distribution, in milliseconds.
type Quantiles struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

func quantiles(h *hist) Quantiles {
	h.mu.Lock()
	defer h.mu.Unlock()
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Quantiles{Count: h.h.TotalCount(), P50: ms(h.h.ValueAtQuantile(50)), P90: ms(h.h.ValueAtQuantile(90)),
		P99: ms(h.h.ValueAtQuantile(99)), Max: ms(h.h.Max())}
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
