package tools

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// truncateHead keeps the first limit bytes of s and says how many more
// bytes were left out. It is the rule for every output except bash's.
func truncateHead(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := validPrefix(s, limit)
	return s[:n] + fmt.Sprintf("\n[output truncated: %d more bytes]", len(s)-n)
}

// validPrefix returns the length of the longest prefix of s no longer than
// n bytes that does not end inside a UTF-8 sequence, so that a cut never
// produces a broken character.
func validPrefix(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for i := n; i > 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return n
}

// completeLen returns the length of s without a trailing incomplete UTF-8
// sequence, which a byte-count cut may leave behind.
func completeLen(s string) int {
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if utf8.FullRuneInString(s[i:]) {
				return len(s)
			}
			return i
		}
	}
	return len(s)
}

// validSuffixStart returns the index at which the longest suffix of s that
// starts on a character boundary, and is no longer than n bytes, begins.
func validSuffixStart(s string, n int) int {
	i := max(len(s)-n, 0)
	for j := i; j < len(s) && j < i+utf8.UTFMax; j++ {
		if utf8.RuneStart(s[j]) {
			return j
		}
	}
	return i
}

// headTail captures a command's output in bounded memory: it keeps the
// first headMax bytes and the last tailMax bytes, and counts the rest. A
// command that prints gigabytes costs headMax+2*tailMax bytes at most.
// It is written by one goroutine and read after that goroutine is done, so
// it needs no lock.
type headTail struct {
	headMax, tailMax int
	head, tail       []byte
	total            int64
}

func newHeadTail(limit int) *headTail {
	return &headTail{headMax: limit / 2, tailMax: limit - limit/2}
}

func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	h.total += int64(n)
	if room := h.headMax - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	h.tail = append(h.tail, p...)
	// The tail is compacted only once it is twice its size, so that the
	// copying stays amortised O(1) per byte.
	if len(h.tail) > 2*h.tailMax {
		h.tail = append(h.tail[:0], h.tail[len(h.tail)-h.tailMax:]...)
	}
	return n, nil
}

// String renders the capture: everything when it fits, else the head, a
// marker with the number of bytes left out of the middle, and the tail.
func (h *headTail) String() string {
	if h.total <= int64(h.headMax+h.tailMax) {
		return string(h.head) + string(h.tail)
	}
	head := string(h.head)
	head = head[:completeLen(head)]
	tail := string(h.tail)
	tail = tail[validSuffixStart(tail, h.tailMax):]
	dropped := h.total - int64(len(head)) - int64(len(tail))
	var b strings.Builder
	b.Grow(len(head) + len(tail) + 80)
	b.WriteString(head)
	if !strings.HasSuffix(head, "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[output truncated: %d bytes left out of the middle; the first %d and the last %d bytes are shown]\n", dropped, len(head), len(tail))
	b.WriteString(tail)
	return b.String()
}

// formatDuration renders a duration for a marker: "10m", "1m30s", "2.5s",
// "300ms", never Go's "10m0s".
func formatDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	s := d.Round(time.Millisecond).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
