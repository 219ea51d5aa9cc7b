package actors

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/prompt"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/tools"
	"github.com/mm-agent/mm/tools/skills"
)

// The session's system message (package prompt): mm's prompt in the size
// the model's window calls for, the user's own file, the skills, the
// project's instructions and the environment block. It is made again only
// when one of them changed (dirty), and only where no model call is in
// flight (a turn's start, and before each model call), because a call's
// request shares the history's first message. The environment is gathered
// once when the session opens, off the actor; the first turn waits for it
// (prompt.GitTimeout at most), so that every request of the session
// starts with the same system message and the servers' prompt caches hold.
// The instructions are looked at again (stat, then read if changed) at the
// start of each turn, off the actor too.

// sysState is what the system message is made of besides the session's
// settings.
type sysState struct {
	// compact is the prompt size chosen; fixed once chosen with a known
	// window, and kept for the session (until the model changes).
	compact, fixed bool
	// own is the user's prompt file (prompt.systemFile) as read when the
	// session opened.
	own string
	// root is where instructions are looked for from (prompt.Root); files
	// are the ones the system message holds.
	root  string
	files []prompt.File
	// watched says the runtime's Watch holds the folders files came
	// from, as looked at for a budget of looked bytes: while it says
	// they are the same, a turn takes files as they are, with no stat.
	watched bool
	looked  int
	// empty are the folders the last look found no file in (a next look
	// stats each once, not once per name: prompt.DiscoverAgain).
	empty []prompt.Empty
	// env is the environment gathered when the session opened, once
	// envReady; envDone is closed when the gathering is over.
	env      prompt.Env
	envReady bool
	envDone  chan struct{}
	envOut   *prompt.Env
	// shown are the subfolders' instruction files shown after a tool's
	// result, with their stamp then (a file changed since is shown again).
	shown map[string]prompt.Stamp
	// dirty says history[0] is to be made again.
	dirty bool
}

// reads is what a session reads from the disk as it opens, off its actor
// (read): its skills, the user's prompt file and the instruction files.
// Plain data: an opening session is sent it (opened).
type reads struct {
	SkillDirs []string
	Skills    *skills.Set
	// Own is the user's prompt file (prompt.systemFile), OwnErr why it
	// could not be read.
	Own, OwnErr string
	// Root, Files, Empty, Watched and Looked are the instructions as the
	// session's Finder found them (sysState's fields of those names).
	Root string
	// Env is the environment, taken at once when Root is no repository
	// (prompt.GatherBare); nil: it is gathered off the actor (git).
	Env     *prompt.Env
	Files   []prompt.File
	Empty   []prompt.Empty
	Watched bool
	Looked  int
}

// read reads what the session needs from the disk as it opens. It runs off
// the actor, on a session filled (fill) by the caller and never shared.
func (s *session) read() *reads {
	cfg := s.rt.cfg
	r := &reads{}
	root, git := prompt.Root(s.cwd)
	r.Root = root
	if !git {
		env := prompt.GatherBare(s.cwd, time.Now())
		r.Env = &env
	}
	r.SkillDirs = s.rt.skillDirs(s.cwd)
	r.Skills = skills.Load(r.SkillDirs)
	if own, err := prompt.ReadOwn(cfg.Prompt.SystemFile); err != nil {
		r.OwnErr = err.Error()
	} else {
		r.Own = own
	}
	f := s.finder()
	r.Looked = f.MaxBytes
	r.Files, r.Empty, r.Watched = f.Watched(s.rt.watch, s.id, r.Root, s.cwd, nil, nil)
	return r
}

// openSystem makes the system message from what was read (read), with
// the environment when read took it (no repository), else while it is
// gathered off the actor.
func (s *session) openSystem(r *reads) {
	if r.OwnErr != "" {
		s.rt.log.Warn(fmt.Sprintf("[acp] session %s: prompt.systemFile: %s; the session uses mm's prompt alone", s.id, r.OwnErr))
	}
	s.sys.root, s.sys.own = r.Root, r.Own
	s.sys.looked = r.Looked
	s.sys.files, s.sys.empty, s.sys.watched = r.Files, r.Empty, r.Watched
	s.sys.dirty = true
	if r.Env != nil {
		// No repository: the environment is there already, and the
		// system message is made once, with it.
		s.sys.env, s.sys.envReady = *r.Env, true
	} else {
		done, out := make(chan struct{}), new(prompt.Env)
		s.sys.envDone, s.sys.envOut = done, out
		cwd, root, confine, ctx := s.cwd, s.sys.root, s.confine(), s.rt.ctx
		s.rt.goWork(func() {
			defer close(done)
			*out = prompt.Gather(ctx, cwd, root, time.Now(), confine)
		})
	}
	s.applySystem()
}

// finder is the session's instruction finder, for its model's window: a
// project file is read only where the session's file tools may read it
// (inside its roots, not hidden by its sandbox).
func (s *session) finder() prompt.Finder {
	f := prompt.Finder{
		Names:    s.rt.cfg.Instructions.Files,
		MaxBytes: s.instructionBytes(),
	}
	if home, err := os.UserHomeDir(); err == nil {
		f.Global = filepath.Join(home, ".config", "mm")
	}
	env := tools.Env{Roots: s.roots, Sandbox: s.policy()}
	if len(env.Roots) > 0 || env.Sandbox.Confined() {
		f.Allow = func(path string) bool { return env.Readable(path) == nil }
	}
	return f
}

// takeEnv takes the gathered environment once it is there, without
// waiting.
func (s *session) takeEnv() {
	if s.sys.envReady || s.sys.envDone == nil {
		return
	}
	select {
	case <-s.sys.envDone:
		s.sys.env, s.sys.envReady, s.sys.dirty = *s.sys.envOut, true, true
	default:
	}
}

// waitEnv returns a function, for a work goroutine, that waits for the
// environment to be gathered (it gives up at the gathering's own bound).
func (s *session) waitEnv() func() {
	done := s.sys.envDone
	if done == nil || s.sys.envReady {
		return func() {}
	}
	return func() {
		select {
		case <-done:
		case <-time.After(prompt.GitTimeout + time.Second):
		}
	}
}

// fresh says the instruction files the session holds are those on disk
// as the prompt with the Watch's ticket asked found them: the Watch saw
// no change in their folders since they were looked at, with the budget
// the session's model gives now.
func (s *session) fresh(maxBytes int, asked uint64) bool {
	return s.sys.watched && s.sys.looked == maxBytes && s.rt.watch.SameSince(s.id, asked)
}

// instructionBytes is the instructions' budget for the session's model
// (Finder.MaxBytes).
func (s *session) instructionBytes() int {
	return prompt.InstructionBytes(int(s.rt.cfg.Instructions.MaxBytes), s.rt.windowFor(s.modelID))
}

// useInstructions takes what a turn's start found: the instruction files,
// the folders with none, and whether the Watch holds them, looked at for
// a budget of looked bytes (m.Looked; else the session's were fresh).
func (s *session) useInstructions(m *promptReady) {
	if !m.Looked {
		return
	}
	files := m.Instructions
	s.sys.empty, s.sys.watched, s.sys.looked = m.Empty, m.Watched, m.Bytes
	if !sameFiles(s.sys.files, files) {
		s.sys.files, s.sys.dirty = files, true
	}
}

func sameFiles(a, b []prompt.File) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Path != b[i].Path || a[i].Stamp != b[i].Stamp || a[i].Text != b[i].Text || a[i].Cut != b[i].Cut {
			return false
		}
	}
	return true
}

// applySystem makes history[0] again when something it is made of
// changed, or when the prompt size is still to be chosen and the window
// is now known. It must run where no model call is in flight.
func (s *session) applySystem() {
	s.takeEnv()
	window := s.rt.windowFor(s.modelID)
	if !s.sys.fixed {
		compact := prompt.Compact(window, s.rt.cfg.Prompt.CompactBelow)
		s.sys.dirty = s.sys.dirty || compact != s.sys.compact
		s.sys.compact, s.sys.fixed = compact, window > 0
	}
	if !s.sys.dirty {
		return
	}
	s.sys.dirty = false
	p := prompt.Parts{
		Compact:      s.sys.compact,
		Own:          s.sys.own,
		Replace:      s.rt.cfg.Prompt.SystemMode == "replace",
		Instructions: s.sys.files,
		Env:          s.sys.env,
		Policy:       s.promptPolicy(),
	}
	if !s.sys.envReady {
		p.Env = prompt.Env{Cwd: s.cwd} // no block until it is gathered
	}
	if s.skills != nil {
		for _, k := range s.skills.Skills {
			p.Skills = append(p.Skills, prompt.Skill{Name: k.Name, Description: k.Description})
		}
	}
	system := history.Message{Role: history.RoleSystem, Content: prompt.System(p)}
	if len(s.history) > 0 && s.history[0].Role == history.RoleSystem {
		s.history[0] = system
	} else {
		s.history = append([]history.Message{system}, s.history...)
	}
}

// promptPolicy is what the environment block says of the session's
// settings now.
func (s *session) promptPolicy() prompt.Policy {
	p := prompt.Policy{Ask: s.mode == ModeAsk}
	if pol := s.policy(); pol.Confined() && s.rt.sandbox.Kind() != sandbox.Unconfined {
		p.Sandbox, p.Network, p.Writable = string(pol.Mode), pol.Network, pol.Writable
	}
	return p
}

// nestedLookup is what a tool worker needs to find the instruction files
// of the subfolders a call touched: a copy of the session's, taken when
// the call starts (the calls of a turn run one at a time).
type nestedLookup struct {
	finder    prompt.Finder
	root, cwd string
	shown     map[string]prompt.Stamp
}

// nested returns the session's lookup for a tool call; nil when no
// instruction file is looked for.
func (s *session) nested() *nestedLookup {
	f := s.finder()
	if f.MaxBytes <= 0 || len(f.Names) == 0 {
		return nil
	}
	shown := make(map[string]prompt.Stamp, len(s.sys.shown))
	for k, v := range s.sys.shown {
		shown[k] = v
	}
	return &nestedLookup{finder: f, root: s.sys.root, cwd: s.cwd, shown: shown}
}

// maxNestedPaths bounds the paths of one call looked at: a command line
// may name hundreds.
const maxNestedPaths = 32

// find returns the instruction files of the subfolders paths are in
// that were not shown yet. It reads the disk: a worker's goroutine.
func (n *nestedLookup) find(ctx context.Context, paths []string) []prompt.File {
	if n == nil || len(paths) == 0 || ctx.Err() != nil {
		return nil
	}
	return n.finder.Nested(n.root, n.cwd, paths[:min(len(paths), maxNestedPaths)], n.shown)
}

// withNested appends to a tool's result the subfolder instructions its
// call brought, and remembers them as shown.
func (s *session) withNested(output string, files []prompt.File) string {
	if len(files) == 0 {
		return output
	}
	if s.sys.shown == nil {
		s.sys.shown = map[string]prompt.Stamp{}
	}
	for _, f := range files {
		s.sys.shown[f.Path] = f.Stamp
		output += prompt.NestedNote(f)
		s.rt.log.Info(fmt.Sprintf("[acp] session %s: instructions of %s shown to the model", s.id, f.Path))
	}
	return output
}
