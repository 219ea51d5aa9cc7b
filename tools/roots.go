package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mm-agent/mm/sandbox"
)

// confined are the tools whose Locations are files mm itself opens for
// the session, which Env.Roots bounds.
var confined = map[string]bool{"read_file": true, "write_file": true, "edit_file": true, "fetch_content": true, "lsp": true}

// confine refuses a call of a confined tool that touches a path outside
// env.Roots, links followed: with an error the model reads.
func (env Env) confine(c *Call) error {
	if c.Tool == nil || !confined[c.Tool.Name()] || len(c.Locations) == 0 {
		return nil
	}
	var foreign []string
	if env.Foreign != nil {
		var err error
		if foreign, err = env.Foreign(); err != nil {
			return fmt.Errorf("[%v]", err)
		}
	}
	reads := !c.Mutating && c.Effect == ""
	for _, p := range c.Locations {
		if reads && env.ownOutput(p) {
			// The session's own cut outputs, which its results name.
			continue
		}
		if !env.Within(p) {
			return fmt.Errorf("[outside the folders this server serves (serve.roots: %s): %s]", strings.Join(env.Roots, ", "), p)
		}
		if inAny(RealPath(p), foreign) {
			// Another token's folder: refused as a hidden path is, in
			// the same words, which name no owner.
			return fmt.Errorf("[outside the sandbox: %s is hidden from this session's tools]", p)
		}
		if err := env.inSandbox(p, c.Mutating || c.Effect != ""); err != nil {
			return err
		}
	}
	return nil
}

// inAny says whether path (links followed) lies in one of dirs (each as
// it is on disk).
func inAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if Inside(path, d) {
			return true
		}
	}
	return false
}

// Mentionable says whether a prompt's @path may be read for the session:
// inside the roots, and in no folder of another token's (Foreign; when
// the store cannot say, none is read).
func (env Env) Mentionable(path string) bool {
	if !env.Within(path) {
		return false
	}
	if env.Foreign == nil {
		return true
	}
	foreign, err := env.Foreign()
	return err == nil && !inAny(RealPath(path), foreign)
}

// inSandbox refuses what the session's sandbox policy would refuse its
// commands (package sandbox): a hidden path, and, for a call that writes,
// anything in read-only and anything outside the session's folders in
// workspace-write. mm's own tools obey it as bash does.
func (env Env) inSandbox(path string, writes bool) error {
	p := env.Sandbox
	if !p.Confined() {
		return nil
	}
	real := RealPath(path)
	inWritable := func(dir string) bool {
		for _, w := range p.Writable {
			if Inside(RealPath(w), RealPath(dir)) {
				return true
			}
		}
		return false
	}
	if !writes {
		for _, r := range p.Readable {
			if Inside(real, RealPath(r)) {
				return nil
			}
		}
	}
	for _, h := range p.Hidden {
		if Inside(real, RealPath(h)) && !inWritable(h) {
			return fmt.Errorf("[outside the sandbox: %s is hidden from this session's tools]", path)
		}
	}
	if !writes {
		return nil
	}
	switch p.Mode {
	case sandbox.ReadOnly:
		return fmt.Errorf("[outside the sandbox: the session is read-only and writes nothing: %s]", path)
	case sandbox.WorkspaceWrite:
		for _, w := range p.Writable {
			if !Inside(real, RealPath(w)) {
				continue
			}
			if protected, _ := NewSensitive(p.Protected); len(p.Protected) > 0 && protected.Match(w, path) {
				return fmt.Errorf("[outside the sandbox: workspace-write keeps %s read-only (tools.sensitive, sandbox.protectGit)]", path)
			}
			return nil
		}
		return fmt.Errorf("[outside the sandbox: workspace-write lets the session write only in %s: %s]", strings.Join(p.Writable, ", "), path)
	}
	return nil
}

// Readable says why mm may not read path for the session (nil when it
// may): outside env.Roots, or hidden by its sandbox. mm reads files of its
// own for the session (its instruction files) under the rules its file
// tools obey.
func (env Env) Readable(path string) error {
	if !env.Within(path) {
		return fmt.Errorf("[outside the folders this server serves (serve.roots: %s): %s]", strings.Join(env.Roots, ", "), path)
	}
	if env.Foreign != nil {
		foreign, err := env.Foreign()
		if err != nil {
			return fmt.Errorf("[%v]", err)
		}
		if inAny(RealPath(path), foreign) {
			return fmt.Errorf("[outside the sandbox: %s is hidden from this session's tools]", path)
		}
	}
	return env.inSandbox(path, false)
}

// ownOutput says whether path is in the session's folder of whole
// outputs (Output.Dir), links followed.
func (env Env) ownOutput(path string) bool {
	return env.Output.Dir != "" && Inside(RealPath(path), RealPath(env.Output.Dir))
}

// Within says whether path, an absolute one, is in one of env.Roots once
// links are followed (always, without roots).
func (env Env) Within(path string) bool {
	if len(env.Roots) == 0 {
		return true
	}
	real := RealPath(path)
	for _, r := range env.Roots {
		if Inside(real, RealPath(r)) {
			return true
		}
	}
	return false
}

// RealPath is path with its links followed: of its longest part that
// exists, the rest (a file to be made) joined as it is.
func RealPath(path string) string {
	path = filepath.Clean(path)
	rest := ""
	for {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			return filepath.Join(real, rest)
		} else if !os.IsNotExist(err) {
			return filepath.Join(path, rest)
		}
		parent := filepath.Dir(path)
		if parent == path {
			return filepath.Join(path, rest)
		}
		rest = filepath.Join(filepath.Base(path), rest)
		path = parent
	}
}

// Inside says whether path is dir or below it (both clean and absolute).
func Inside(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
