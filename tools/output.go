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
