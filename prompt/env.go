package prompt

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"
)

// The environment block tells the model what it would otherwise learn by
// failing: the date, the system, what git holds, whether rg is there, what
// the sandbox lets commands do and whether the user approves each call. It
// is gathered once, when a session opens, so that the system message stays
// the same from call to call and the servers' prompt caches hold.

// GitTimeout bounds the git commands of the snapshot, together.
const GitTimeout = 2 * time.Second

// Limits of the git snapshot: the status lines shown (the others are
// counted), the longest line, the commits, and the bytes read of each
// command's output.
const (
	maxStatusLines = 20
	maxLineBytes   = 200
	maxCommits     = 3
	maxGitOutput   = 8 << 10
)

// Env is what a session's environment block says that does not depend on
// the session's settings: gathered once (Gather).
type Env struct {
	Date time.Time
	// OS and Arch are runtime.GOOS and GOARCH.
	OS, Arch string
	Cwd      string
	// Git is the snapshot of the repository around Cwd; nil outside one.
	Git *Git
	// RG says whether rg (ripgrep) is on the PATH.
	RG bool
}

// Git is a repository's state when the session opened.
type Git struct {
	Root   string
	Branch string
	// Status are `git status --short` lines, at most maxStatusLines;
	// More counts the others.
	Status []string
	More   int
	// Commits are the last commits, one line each.
	Commits []string
	// Err says why the snapshot is missing or short (a timeout, git not
	// installed); "" when it is whole.
	Err string
}

// Policy is what the session's settings let commands and edits do; it
// may change during a session (the user sets another mode).
type Policy struct {
	// Sandbox is the sandbox mode: "" (unconfined), read-only,
	// workspace-write or full; Network says whether confined commands
	// reach the network, Writable where workspace-write lets them write.
	Sandbox  string
	Network  bool
	Writable []string
	// Ask says edits and commands wait for the user's approval (the
	// session's ask mode); false is yolo.
	Ask bool
}

// Gather takes the environment of a session in cwd whose repository (if
// any) is at root: root == cwd and no .git there means none. confine, when
// set, makes the git commands run as the session's commands do (a tenant's
// repository may configure what git runs); lookPath finds rg.
func Gather(ctx context.Context, cwd, root string, now time.Time, confine func(*exec.Cmd) (func(), error)) Env {
	env := GatherBare(cwd, now)
	if _, err := os.Lstat(root + string(os.PathSeparator) + ".git"); err == nil {
		env.Git = snapshot(ctx, cwd, root, confine)
	}
	return env
}

// GatherBare is Gather for a cwd in no repository (Root found none): it
// runs no command and costs no more than a lock, so a session takes it
// as it opens rather than off its actor.
func GatherBare(cwd string, now time.Time) Env {
	return Env{Date: now, OS: runtime.GOOS, Arch: runtime.GOARCH, Cwd: cwd, RG: rgInstalled(now)}
}

// rgSeen is whether rg was on PATH when last looked for, and when: a
// machine's programs change seldom, and looking costs a stat of every
// folder of PATH, which a process that opens sessions by the thousand
// pays once a minute, not once a session.
var rgSeen struct {
	sync.Mutex
	at time.Time
	ok bool
}

// rgLookAgain is how long what rgSeen says holds.
const rgLookAgain = time.Minute

func rgInstalled(now time.Time) bool {
	rgSeen.Lock()
	defer rgSeen.Unlock()
	if rgSeen.at.IsZero() || now.Sub(rgSeen.at) >= rgLookAgain || now.Before(rgSeen.at) {
		_, err := exec.LookPath("rg")
		rgSeen.at, rgSeen.ok = now, err == nil
	}
	return rgSeen.ok
}

// snapshot runs `git status` and `git log` side by side, within
// GitTimeout, without taking git's optional locks (the user's own git
// commands must not find the index locked) and without a file-system
// monitor the repository may name.
func snapshot(ctx context.Context, cwd, root string, confine func(*exec.Cmd) (func(), error)) *Git {
	ctx, cancel := context.WithTimeout(ctx, GitTimeout)
	defer cancel()
	g := &Git{Root: root}
	var status, log []byte
	var statusErr, logErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		status, statusErr = git(ctx, cwd, confine, "status", "--porcelain=v1", "--branch", "--untracked-files=normal")
	}()
	go func() {
		defer wg.Done()
		log, logErr = git(ctx, cwd, confine, "log", "--oneline", "--no-decorate", "--no-show-signature", fmt.Sprintf("-n%d", maxCommits))
	}()
	wg.Wait()
	if statusErr != nil {
		g.Err = gitError(ctx, statusErr)
		return g
	}
	lines := strings.Split(strings.TrimRight(string(status), "\n"), "\n")
	if len(lines) > 0 && strings.HasPrefix(lines[0], "## ") {
		g.Branch = branchOf(lines[0][3:])
		lines = lines[1:]
	}
	for _, l := range lines {
		if l == "" {
			continue
		}
		if len(g.Status) == maxStatusLines {
			g.More++
			continue
		}
		g.Status = append(g.Status, clipLine(l))
	}
	if len(status) >= maxGitOutput {
		g.Err = "the status is longer than shown"
	}
	if logErr == nil {
		for _, l := range strings.Split(strings.TrimRight(string(log), "\n"), "\n") {
			if l != "" && len(g.Commits) < maxCommits {
				g.Commits = append(g.Commits, clipLine(l))
			}
		}
	}
	return g
}

// git runs one git command in dir and returns at most maxGitOutput bytes
// of its standard output.
func git(ctx context.Context, dir string, confine func(*exec.Cmd) (func(), error), args ...string) ([]byte, error) {
	args = append([]string{"--no-optional-locks", "-c", "core.fsmonitor=false", "-c", "color.ui=false"}, args...)
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	out := &capped{max: maxGitOutput}
	cmd.Stdout = out
	cmd.WaitDelay = time.Second
	started := func() {}
	if confine != nil {
		var err error
		if started, err = confine(cmd); err != nil {
			return nil, err
		}
	}
	err := cmd.Start()
	started()
	if err == nil {
		err = cmd.Wait()
	}
	return out.buf.Bytes(), err
}

func gitError(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return fmt.Sprintf("git did not answer within %s", GitTimeout)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return fmt.Sprintf("git status failed (%s)", ee.ProcessState)
	}
	return "git status could not run: " + err.Error()
}

// branchOf reads the branch from the header of `git status --branch`:
// "main...origin/main [ahead 1]", "No commits yet on main", "HEAD (no
// branch)".
func branchOf(header string) string {
	switch {
	case strings.HasPrefix(header, "No commits yet on "):
		return strings.TrimPrefix(header, "No commits yet on ") + " (no commits yet)"
	case strings.HasPrefix(header, "Initial commit on "):
		return strings.TrimPrefix(header, "Initial commit on ") + " (no commits yet)"
	case strings.HasPrefix(header, "HEAD (no branch)"):
		return "none (detached HEAD)"
	}
	name, rest, _ := strings.Cut(header, "...")
	if i := strings.Index(rest, " ["); i >= 0 {
		return name + " " + rest[i+1:]
	}
	return name
}

func clipLine(l string) string {
	if len(l) <= maxLineBytes {
		return l
	}
	cut := maxLineBytes
	for cut > 0 && l[cut]&0xC0 == 0x80 {
		cut--
	}
	return l[:cut] + "…"
}

// capped keeps the first max bytes written to it and drops the rest.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// render writes the environment block: the facts gathered, then the
// policy in force.
func (env *Env) render(b *strings.Builder, p Policy) {
	b.WriteString("# Environment\nGathered when this session started; the git status may have changed since.\n")
	fmt.Fprintf(b, "- Date: %s\n", env.Date.Format("2006-01-02 (Monday)"))
	sys := env.OS + "/" + env.Arch
	if env.OS == "darwin" {
		sys += " (BSD tools: `sed -i ''`, no GNU-only flags)"
	}
	fmt.Fprintf(b, "- System: %s. Each bash call runs `bash -c` in a fresh shell in the working directory.\n", sys)
	fmt.Fprintf(b, "- Working directory: %s\n", env.Cwd)
	if g := env.Git; g == nil {
		b.WriteString("- Git: not a git repository\n")
	} else {
		g.render(b)
	}
	if env.RG {
		b.WriteString("- rg (ripgrep): installed\n")
	} else {
		b.WriteString("- rg (ripgrep): not installed; search with grep -rn\n")
	}
	p.render(b)
}

func (g *Git) render(b *strings.Builder) {
	fmt.Fprintf(b, "- Git: repository at %s", g.Root)
	if g.Branch != "" {
		fmt.Fprintf(b, ", branch %s", g.Branch)
	}
	b.WriteString("\n")
	switch {
	case len(g.Status) == 0 && g.Err == "":
		b.WriteString("- Git status: clean\n")
	case len(g.Status) > 0:
		b.WriteString("- Git status (short):\n")
		for _, l := range g.Status {
			b.WriteString("    " + l + "\n")
		}
		if g.More > 0 {
			fmt.Fprintf(b, "    … and %d more\n", g.More)
		}
	}
	if g.Err != "" {
		fmt.Fprintf(b, "- Git status: unknown (%s)\n", g.Err)
	}
	if len(g.Commits) > 0 {
		b.WriteString("- Last commits:\n")
		for _, c := range g.Commits {
			b.WriteString("    " + c + "\n")
		}
	}
}

func (p Policy) render(b *strings.Builder) {
	switch p.Sandbox {
	case "read-only":
		b.WriteString("- Sandbox: read-only: commands and file tools may read but not write; a write fails")
	case "workspace-write":
		fmt.Fprintf(b, "- Sandbox: workspace-write: commands and file tools may write only in %s and the temporary folder; a write elsewhere fails", strings.Join(p.Writable, ", "))
	case "full":
		b.WriteString("- Sandbox: full: commands may write wherever the user may, but do not see mm's own files or ~/.ssh")
	default:
		b.WriteString("- Sandbox: none: commands run with the user's own rights\n")
	}
	if p.Sandbox != "" {
		if p.Network {
			b.WriteString("; network on\n")
		} else {
			b.WriteString("; network off (loopback only)\n")
		}
	}
	if p.Ask {
		b.WriteString("- Approval: the user approves each edit and command before it runs; a call they reject comes back saying so, and is not to be tried again unchanged\n")
	} else {
		b.WriteString("- Approval: edits and commands run without asking (yolo), except calls that touch sensitive files such as .env and keys\n")
	}
}
