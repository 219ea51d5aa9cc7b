//go:build unix

package procs

import (
	"syscall"
	"testing"
)

func TestParseStat(t *testing.T) {
	state, pgid, ok := parseStat([]byte("4242 (we) ird (name) S 1 4240 4240 0 -1 4194560"))
	if !ok || state != 'S' || pgid != 4240 {
		t.Errorf("got %c %d %v", state, pgid, ok)
	}
	if _, _, ok := parseStat([]byte("garbage")); ok {
		t.Error("parsed garbage")
	}
	if !groupHasLiving(syscall.Getpgrp()) {
		t.Error("the test's own group has no living member")
	}
}
