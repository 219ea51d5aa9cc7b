package actors

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/mm-agent/mm/sandbox"
)

// policy is what the session's commands may touch (package sandbox): the
// runtime's mode and network, the session's cwd to write, and, hidden,
// mm's own state and config, ~/.ssh and the folder of session files in the
// cwd (other sessions', maybe other tenants').
func (s *session) policy() sandbox.Policy {
	if s.rt.sandbox == nil || s.rt.sandboxMode == sandbox.Off {
		return sandbox.Policy{}
	}
	hidden := slices.Clone(s.rt.hidden)
	if dir := s.rt.cfg.Sessions.Dir; dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(s.cwd, dir)
		}
		hidden = append(hidden, dir)
	}
	p := sandbox.Policy{Mode: s.rt.sandboxMode, Network: s.rt.cfg.Sandbox.Network, Writable: []string{s.cwd}, Hidden: hidden}
	if s.rt.sandbox.Kind() == sandbox.Landlock {
		p.Temp = s.temp()
	}
	return p
}

// temp is the session's own temporary folder, made on first use and
// removed when the session stops: under Landlock, /tmp is shared, and a
// confined command writes here instead ("" if it cannot be made).
func (s *session) temp() string {
	if s.tempDir == "" {
		if d, err := os.MkdirTemp("", "mm-session-"); err == nil {
			s.tempDir = d
		}
	}
	return s.tempDir
}

// removeTemp removes the session's temporary folder, off the actor.
func (s *session) removeTemp() {
	if d := s.tempDir; d != "" {
		s.tempDir = ""
		s.rt.goWork(func() { _ = os.RemoveAll(d) })
	}
}

// confine is the tools' Confine for the session: nil when its commands are
// not confined. On a machine that cannot confine them they run unconfined,
// as the banner said.
func (s *session) confine() func(*exec.Cmd) error {
	p := s.policy()
	if !p.Confined() || s.rt.sandbox.Kind() == sandbox.Unconfined {
		return nil
	}
	sb := s.rt.sandbox
	return func(cmd *exec.Cmd) error { return sb.Wrap(cmd, p) }
}

// logPolicy says once, when the session starts, how its commands are
// confined.
func (s *session) logPolicy() {
	p := s.policy()
	if !p.Confined() {
		return
	}
	how := string(s.rt.sandbox.Kind())
	switch s.rt.sandbox.Kind() {
	case sandbox.Unconfined:
		how = "unconfined here: " + s.rt.sandbox.Why()
	case sandbox.Landlock:
		how = "landlock: no path is hidden"
	}
	s.rt.log.Info(fmt.Sprintf("[acp] session %s: commands confined: %s (%s)", s.id, p, how))
}
