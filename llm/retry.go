package llm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file holds the retry policy of guard.RoundTrip: which refusals are
// worth another try, and how long to wait before it. A request is retried
// only before any byte of its answer reached langchaingo, so a retry never
// repeats text the user has already seen.

// maxRetryWait bounds every wait. A server that asks for longer (a quota,
// a long outage) fails the call at once with its request in the error,
// rather than holding the turn with nothing to show.
const maxRetryWait = 30 * time.Second

// retryable reports the statuses that mean "not now" rather than "no":
// rate limited (429), a proxy that lost its upstream (502), a server busy
// or loading its model (503), Anthropic's overloaded (529).
func retryable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, 529:
		return true
	}
	return false
}

// retryAfter reads the Retry-After header, in seconds or as an HTTP date
// (RFC 9110 §10.2.3); ok is false when there is none or it is unreadable,
// and a date in the past is no wait.
func retryAfter(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		// Clamp (to about 30 years) before converting, so that an absurd
		// value cannot overflow into a short wait.
		return time.Duration(min(secs, 1e9)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// backoff is the wait before retry attempt+1 when the server named none:
// base doubled per attempt, plus up to half again of random jitter so that
// the sessions a busy server refused together do not return together,
// capped at maxRetryWait.
func backoff(base time.Duration, attempt int) time.Duration {
	if attempt >= 32 || base > maxRetryWait>>attempt {
		return maxRetryWait
	}
	d := base << attempt
	if half := int64(d / 2); half > 0 {
		d += time.Duration(rand.Int64N(half))
	}
	return min(d, maxRetryWait)
}

// wait tells the user about retry attempt+1, then waits d, both under a
// hold of the idle timer (the silence is ours, not the server's). It
// returns ctx's error if ctx ends first: a cancel ends the wait at once.
func (c *call) wait(ctx context.Context, d time.Duration, reason string, attempt int) error {
	c.hold()
	defer c.release()
	if c.notify != nil {
		c.notify(fmt.Sprintf("%s, retrying in %s (retry %d of %d)\n", reason, waitText(d), attempt+1, c.retries))
	}
	return Pause(ctx, d)
}

// waitText says a wait the way a user reads it: whole seconds, rounded up,
// from one second on; milliseconds below.
func waitText(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%d s", ceilSeconds(d))
	}
	return fmt.Sprintf("%d ms", (d+time.Millisecond-1)/time.Millisecond)
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// retriesText is "1 retry" or "n retries".
func retriesText(n int) string {
	if n == 1 {
		return "1 retry"
	}
	return fmt.Sprintf("%d retries", n)
}
