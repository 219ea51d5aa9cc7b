package protocol_test

import (
	"context"
	"fmt"
	"os"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
)

// The hostile-peer tests (issue 18) measure what each attack costs while a
// second session of the same agent plays ping → pong turns: the figures go
// to the test's log, never into an assertion (the machines are shared).

// attackFigures are what an attack cost the process, measured while it ran.
type attackFigures struct {
	elapsed   time.Duration
	cpu       time.Duration // user+system CPU of the whole test process
	heapPeak  uint64        // highest live heap sampled, above the heap before
	heapHeld  int64         // live heap after, less before (both after a collection)
	worstPong time.Duration // slowest ping → pong turn of the other session
	pongs     int
}

func (f attackFigures) String() string {
	return fmt.Sprintf("%v elapsed · %v CPU · heap peak +%.1f MiB · heap held after +%.1f MiB · process RSS peak %s · second session: %d ping→pong, worst %v",
		f.elapsed.Round(time.Millisecond), f.cpu.Round(time.Millisecond), float64(f.heapPeak)/(1<<20), float64(f.heapHeld)/(1<<20),
		rssPeak(), f.pongs, f.worstPong.Round(time.Millisecond))
}

// measureAttack runs attack while it samples the live heap every 5 ms and
// a second session (pingSID, on the same agent) asks ping again and again.
func measureAttack(t *testing.T, ctx context.Context, conn *acptest.Conn, pingSID acp.SessionId, attack func()) attackFigures {
	t.Helper()
	var f attackFigures
	base := heapNow()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			if v := int64(sample[0].Value.Uint64()) - base; v > int64(f.heapPeak) {
				f.heapPeak = uint64(v)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var pongErr error
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			res, err := conn.Ask(ctx, pingSID, "ping")
			if err == nil && res.StopReason != acp.StopReasonEndTurn {
				err = fmt.Errorf("stopReason %s", res.StopReason)
			}
			if err != nil {
				pongErr = err
				return
			}
			f.worstPong = max(f.worstPong, time.Since(start))
			f.pongs++
		}
	}()
	// The pings start before the attack, so that one is waiting on the
	// model or running when the attack starts.
	time.Sleep(20 * time.Millisecond)
	cpu0, start := cpuTime(), time.Now()
	attack()
	f.elapsed, f.cpu = time.Since(start), cpuTime()-cpu0
	close(stop)
	wg.Wait()
	if pongErr != nil {
		t.Errorf("the second session's ping failed: %v", pongErr)
	}
	f.heapHeld = heapNow() - base
	return f
}

// cpuTime is the CPU the test process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssPeak is the process's peak resident set (VmHWM): the whole test
// binary's, meaningful when the test runs alone.
func rssPeak() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
