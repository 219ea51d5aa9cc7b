package actors

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/tools"
)

// policy is what the session's commands may touch (package sandbox), as
// plain data: it is made in the actor, which opens no file for it (Wrap
// looks at the disk when a command starts, on the tool's goroutine). The
// runtime's mode and network, the session's cwd and additional
// directories to write, and, hidden,
// mm's own state and config, ~/.ssh and the folder of session files in the
// cwd (other sessions', maybe other tenants'). The folders of other
// tokens are hidden too, but are not in it: confine asks the store for
// them when each command starts.
func (s *session) policy() sandbox.Policy {
	if s.rt.sandbox == nil || s.sandboxMode == sandbox.Off {
		return sandbox.Policy{}
	}
	hidden := slices.Clone(s.rt.hidden)
	if dir := s.rt.cfg.Sessions.Dir; dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(s.cwd, dir)
		}
		hidden = append(hidden, dir)
	}
	if s.outputDir != "" {
		// Every session's outputs are hidden, but for its own, which its
		// results name.
		hidden = append(hidden, tools.OutputsRoot())
	}
	p := sandbox.Policy{Mode: s.sandboxMode, Network: s.network, Writable: append([]string{s.cwd}, s.dirs...), Hidden: hidden}
	if s.outputDir != "" {
		p.Readable = []string{s.outputDir}
	}
	if p.Mode == sandbox.WorkspaceWrite {
		p.Protected = s.rt.cfg.Tools.Sensitive
		if s.rt.cfg.Sandbox.ProtectGit {
			p.Protected = append(slices.Clip(p.Protected), ".git/**")
		}
	}
	if s.rt.sandbox.Kind() == sandbox.Landlock {
		p.Temp = s.tempDir
	}
	p.User, p.Env = s.rt.sandboxUser, s.rt.cfg.Sandbox.Env
	return p
}

// landlockTemp names a session's own temporary folder when Landlock
// confines its commands ("" otherwise): unguessable, under the system's
// temporary folder, made by the first command (sandbox.Policy.Temp).
func landlockTemp(rt *Runtime) string {
	if rt.sandbox == nil || rt.sandbox.Kind() != sandbox.Landlock {
		return ""
	}
	return filepath.Join(os.TempDir(), "mm-session-"+rand.Text())
}

// outputDir names a session's folder of whole outputs: "" when
// tools.output.keepBytes keeps none.
func outputDir(rt *Runtime, id string) string {
	if rt.cfg.Tools.Output.KeepBytes <= 0 {
		return ""
	}
	return tools.NewOutputDir(id)
}

// output is how the result of the session's call callID is sized (a
// share of its model's window) and where it is kept whole when cut.
func (s *session) output(callID string) tools.Output {
	o := s.rt.cfg.Tools.Output
	s.outputGiven = s.outputGiven || s.outputDir != ""
	return tools.Output{
		Budget: tools.OutputBudget(s.rt.windowFor(s.modelID), int(o.MinBytes), int(o.MaxBytes)),
		Dir:    s.outputDir, Name: callID + ".out", Keep: int64(o.KeepBytes), Owner: s.policy().User,
	}
}

// removeTemp removes the session's temporary folder and its folder of
// whole outputs, those that may have been made, off the actor, and ends
// its own network.
func (s *session) removeTemp() {
	out := s.outputDir
	if !s.outputGiven {
		out = ""
	}
	for _, d := range []string{s.tempDir, out} {
		if d != "" {
			s.rt.goWork(func() { _ = os.RemoveAll(d) })
		}
	}
	s.tempDir, s.outputDir, s.outputGiven = "", "", false
	if n := s.net; n != nil {
		s.net = nil
		s.rt.goWork(n.Close)
	}
}

// confine is the tools' Confine for the session: nil when its commands are
// not confined. On a machine that cannot confine them they run unconfined,
// as the banner said. Each command hides, besides the policy's paths, the
// folders other tokens own as the store says when it starts (foreign):
// a folder claimed since the session started included. With the network
// on, they share the session's own network (sandbox.Network), made by the
// first of them.
func (s *session) confine() func(*exec.Cmd) (func(), error) {
	p := s.policy()
	if !p.Confined() || s.rt.sandbox.Kind() == sandbox.Unconfined {
		return nil
	}
	if p.Network && s.rt.shared && s.net == nil {
		s.net = sandbox.NewNetwork(p.User)
	}
	sb, net, foreign := s.rt.sandbox, s.net, s.foreign()
	return func(cmd *exec.Cmd) (func(), error) {
		p := p
		if foreign != nil {
			others, err := foreign()
			if err != nil {
				return func() {}, err
			}
			// One that holds this session's cwd is left out by the
			// sandbox (it would hide the cwd too); the folders' owners
			// let none hold it.
			p.Hidden = append(slices.Clip(p.Hidden), others...)
		}
		return sb.Wrap(cmd, p, net)
	}
}

// hookConfine is how the session's hooks run: confined like its commands
// on a shared server (Options.Shared), as they are otherwise.
func (s *session) hookConfine(confine func(*exec.Cmd) (func(), error)) func(*exec.Cmd) (func(), error) {
	if !s.rt.shared {
		return nil
	}
	return confine
}

// foreign returns what lists the folders other tokens own, for the
// session's commands and file tools to keep out of (tools.Env.Foreign),
// off the actor: nil for mm -acp's user, who owns every folder. When the
// store cannot say, it logs why, and its error stops the command or tool.
func (s *session) foreign() func() ([]string, error) {
	others, owner, log, id := s.rt.others, s.owner, s.rt.log, s.id
	if others == nil || owner == "" {
		return nil
	}
	return func() ([]string, error) {
		out, err := others(owner)
		if err != nil {
			log.Error(fmt.Sprintf("[acp] session %s: the folders' owners: %v", id, err))
			return nil, fmt.Errorf("mm cannot tell which folders are other tokens' now, so it runs nothing: %w", err)
		}
		return out, nil
	}
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
		how = "landlock: what the session's folders hold is not hidden"
	}
	s.rt.log.Info(fmt.Sprintf("[acp] session %s: commands confined: %s (%s)", s.id, p, how))
}

// noticeUnconfined tells a client that shows notices, once, that the
// session's commands were to be confined and are not (this machine has
// neither bubblewrap nor Landlock). A client without notices has only the
// banner and the log, as before.
func (s *session) noticeUnconfined() {
	if !s.policy().Confined() || s.rt.sandbox.Kind() != sandbox.Unconfined || !s.client.Caps(s.id).Has(CapNotices) {
		return
	}
	s.warn(Notice{Severity: "warning", Title: "Commands run unconfined",
		Description: fmt.Sprintf("the sandbox asked for (%s) cannot confine them here: %s", s.policy(), s.rt.sandbox.Why())})
}

// onSetSandbox sets the session's sandbox mode: one of the runtime's
// SandboxModes, so that a client narrows what its commands may touch and
// never widens it past what the operator configured.
func (s *session) onSetSandbox(m *SetSandbox) {
	mode, err := sandbox.ParseMode(m.Mode)
	if err == nil && !slices.Contains(s.rt.SandboxModes(), string(mode)) {
		err = fmt.Errorf("sandbox mode %q is not offered here: %s", m.Mode, strings.Join(s.rt.SandboxModes(), ", "))
	}
	if err != nil {
		s.answer(m.Reply, &Outcome{Err: err.Error()})
		return
	}
	if mode != s.sandboxMode {
		s.sandboxMode = mode
		s.sys.dirty = true
		s.sys.watched = false // what the instructions may read changed: look again
		s.logPolicy()
	}
	s.answer(m.Reply, s.outcome())
}

// onSetNetwork turns the network of the session's commands on or off:
// off always, on only when the operator's config lets commands reach it,
// so that a client narrows what its commands do, never widens it.
func (s *session) onSetNetwork(m *SetNetwork) {
	if m.On && !s.rt.cfg.Sandbox.Network {
		s.answer(m.Reply, &Outcome{Err: "the network is off for every session here (sandbox.network: false)"})
		return
	}
	if m.On != s.network {
		s.network = m.On
		s.sys.dirty = true
		s.logPolicy()
	}
	s.answer(m.Reply, s.outcome())
}

// SandboxModes are the sandbox modes a session may be set to: those no
// wider than the runtime's (read-only, then workspace-write, then full);
// none when commands are not confined.
func (rt *Runtime) SandboxModes() []string {
	var out []string
	if rt.sandbox == nil || rt.sandboxMode == sandbox.Off {
		return nil
	}
	for _, m := range sandbox.Modes {
		out = append(out, string(m))
		if m == rt.sandboxMode {
			break
		}
	}
	return out
}

// SandboxMode is the sandbox mode sessions start with, "" when commands
// are not confined.
func (rt *Runtime) SandboxMode() string {
	if rt.sandbox == nil {
		return ""
	}
	return string(rt.sandboxMode)
}

// SandboxMeta is the _meta of a session's responses that says how its
// commands are confined: the mode, the network, and how (bubblewrap,
// landlock, or unconfined where the machine cannot); nil when they are
// not confined.
func (rt *Runtime) SandboxMeta(mode string, network bool) map[string]any {
	if rt.sandbox == nil || mode == "" {
		return nil
	}
	return map[string]any{SandboxKey: map[string]any{
		"mode": mode, "network": network, "with": string(rt.sandbox.Kind()),
	}}
}

// Network says whether sessions' confined commands start with the
// network (sandbox.network).
func (rt *Runtime) Network() bool { return rt.cfg.Sandbox.Network }

// SandboxKey is the _meta key of a session's sandbox policy.
const SandboxKey = "mm.sandbox"
