package main

import (
	"regexp"
	"strings"
)

// raceBlock is one report of the race detector on a process's stderr.
var raceBlock = regexp.MustCompile(`(?s)==================\nWARNING: DATA RACE\n.*?\n==================\n`)

// mmRaces returns the race detector's reports in stderr where one of the
// two accesses is in mm's code: the first frame of its stack outside Go's
// standard library is mm's (the cmd/mm binary's main, or a package of
// github.com/mm-agent/mm). protoactor's cluster races inside itself (its
// block and member lists, read and written by gossip without a lock; its
// remote closing a channel its stop sends on), even when mm's code called
// it: those are not mm's, and a node ignores them (GORACE=exitcode=0).
func mmRaces(stderr string) []string {
	var out []string
	for _, b := range raceBlock.FindAllString(stderr, -1) {
		for _, part := range strings.Split(b, "\n\n") {
			if accessIsMM(part) {
				out = append(out, b)
				break
			}
		}
	}
	return out
}

// raceFrame is a function line of a race report's stack.
var raceFrame = regexp.MustCompile(`(?m)^\s+([^\s/][^\s(]*)\.[^\s]*\(.*\)$`)

// accessIsMM says whether part of a race report is an access (not where a
// goroutine was created) whose first frame outside the standard library
// is mm's.
func accessIsMM(part string) bool {
	if strings.Contains(part, ") created at:\n") {
		return false
	}
	for _, m := range raceFrame.FindAllStringSubmatch(part, -1) {
		pkg := m[1]
		first, _, _ := strings.Cut(pkg, "/")
		if pkg == "main" || strings.HasPrefix(pkg, "main.") {
			return true
		}
		if !strings.Contains(first, ".") {
			continue // the standard library: runtime, sync, bytes…
		}
		return strings.HasPrefix(pkg, "github.com/mm-agent/mm/")
	}
	return false
}

// withoutRaces is stderr without the race detector's reports.
func withoutRaces(stderr string) string { return raceBlock.ReplaceAllString(stderr, "") }
