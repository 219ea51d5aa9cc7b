// Package sandbox confines the commands mm starts for a session: the file
// system they may write (and what they may not see at all), and whether
// they reach the network. It is independent of the approval policy (yolo,
// the permission prompts), which decides whether a command runs; the
// sandbox decides what a running command can touch.
//
// On Linux, a command is confined with bubblewrap (Debian's bubblewrap,
// found on PATH and tried once at start): a mount namespace in which the
// file system is read-only but for the folders the policy lets it write,
// the paths it hides are empty, and, with the network off, a network
// namespace of its own with nothing but loopback. Where bubblewrap is
// missing or cannot run (no user namespaces), commands run unconfined and
// Detect says so: mm says it in its banner. macOS and Windows are
// unconfined.
//
// Concurrency: a Sandbox is safe for concurrent use.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Mode is what a confined command may write.
type Mode string

const (
	// Off leaves commands as they are: mm -acp's default (yolo and the
	// permission prompts guard it).
	Off Mode = ""
	// ReadOnly lets a command read the file system and write nothing but a
	// private temporary folder.
	ReadOnly Mode = "read-only"
	// WorkspaceWrite lets it write the session's folders (its cwd and its
	// additional directories) and a private temporary folder.
	WorkspaceWrite Mode = "workspace-write"
	// Full lets it write anything its user may; the network and the hidden
	// paths still apply.
	Full Mode = "full"
)

// Modes are the modes a session may be given, in the order a client shows
// them.
var Modes = []Mode{ReadOnly, WorkspaceWrite, Full}

// ParseMode reads a mode's name; "" is Off.
func ParseMode(s string) (Mode, error) {
	m := Mode(s)
	if m == Off || slices.Contains(Modes, m) {
		return m, nil
	}
	return Off, fmt.Errorf("unknown sandbox mode %q: want read-only, workspace-write or full", s)
}

// Policy is what one session's commands may do.
type Policy struct {
	Mode Mode
	// Network lets commands reach the network; off, they have loopback
	// only, their own.
	Network bool
	// Writable are the folders WorkspaceWrite lets a command write: the
	// session's cwd and additional directories. Links are followed.
	Writable []string
	// Hidden are paths a confined command sees empty, whatever the mode:
	// mm's session store and state, its config, ~/.ssh, other sessions'
	// folders. A path that does not exist is left out, and so is one that
	// holds a writable folder (hiding it would hide that folder too).
	Hidden []string
	// Protected are patterns (tools.sensitive's: ".env", "*.pem",
	// ".ssh/**") whose matches at the top of each writable folder a command
	// may read but not change; Wrap looks for them when the command starts.
	// bubblewrap only (Landlock cannot narrow a writable folder).
	Protected []string
	// Readable are folders a command may read even where the mode or
	// Hidden would hide them (under the private /tmp of bubblewrap, inside
	// a hidden folder): what mm keeps for the session that its commands
	// may search, such as the whole output of a tool whose result was cut.
	// Links are followed.
	Readable []string
	// Temp is the session's own temporary folder, which Landlock lets a
	// command write and names in TMPDIR, made (0700) when the command starts
	// (with bubblewrap, /tmp is the command's own anyway); "" gives it none.
	Temp string
	// User is who the command runs as; nil runs it as mm's own user, which
	// Wrap refuses when mm runs as root (sandbox.user).
	User *Ident `json:",omitempty"`
	// Env are the names of mm's environment variables a command is given
	// (a name, or a prefix ending in *; sandbox.env), and NAME=value
	// entries to set. No other variable of mm's own reaches it; those the
	// command's caller added do. nil is DefaultEnv.
	Env []string `json:",omitempty"`
}

// Confined says whether p changes anything for a command.
func (p Policy) Confined() bool {
	return p.Mode != Off
}

// String says the policy in a few words, for a log line.
func (p Policy) String() string {
	if p.Mode == Off {
		return "unconfined"
	}
	net := "network on"
	if !p.Network {
		net = "network off"
	}
	return string(p.Mode) + ", " + net
}

// Kind is how commands are confined on this machine.
type Kind string

const (
	Bubblewrap Kind = "bubblewrap"
	Landlock   Kind = "landlock"
	Unconfined Kind = "unconfined"
)

// Sandbox confines commands the one way this machine allows.
type Sandbox struct {
	kind  Kind
	bwrap string // bubblewrap's path
	self  string // this program, Landlock's helper (Main)
	abi   int    // the kernel's Landlock ABI
	why   string // why commands are unconfined, or what Landlock cannot do
}

// Detect finds how commands can be confined here: bubblewrap when it is on
// PATH and can make its namespaces (it runs it once, a few milliseconds),
// else Landlock when the kernel has it (the program must call Main first
// thing), else unconfined; Why says why not bubblewrap.
func Detect() *Sandbox {
	why := bwrapMissing()
	if why == "" {
		path, _ := exec.LookPath("bwrap")
		return &Sandbox{kind: Bubblewrap, bwrap: path}
	}
	if s := LandlockOnly(); s.kind == Landlock {
		s.why = why
		return s
	}
	return &Sandbox{kind: Unconfined, why: why + "; and the kernel has no Landlock"}
}

// DetectWith is Detect held to one way when way names one ("bubblewrap" or
// "landlock"): an error says why that way cannot confine here. "" is
// Detect.
func DetectWith(way string) (*Sandbox, error) {
	switch Kind(way) {
	case "":
		return Detect(), nil
	case Bubblewrap:
		if why := bwrapMissing(); why != "" {
			return nil, errors.New(why)
		}
		path, _ := exec.LookPath("bwrap")
		return &Sandbox{kind: Bubblewrap, bwrap: path}, nil
	case Landlock:
		if s := LandlockOnly(); s.kind != Landlock {
			return nil, errors.New(s.why)
		} else {
			return s, nil
		}
	}
	return nil, fmt.Errorf("unknown way to confine commands %q: want bubblewrap or landlock", way)
}

// bwrapMissing says why bubblewrap cannot confine commands here; "" when
// it can.
func bwrapMissing() string {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		return "bubblewrap (bwrap) is not on PATH (Debian: apt-get install bubblewrap)"
	}
	out, err := exec.Command(path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net",
		"--die-with-parent", "--", "/bin/true").CombinedOutput()
	if err != nil {
		said := oneLine(out, err)
		if hint := bwrapHint(said, os.Geteuid() == 0); hint != "" {
			said += "; " + hint
		}
		return "bubblewrap cannot make its namespaces here: " + said
	}
	return ""
}

// bwrapHint says what mends a failure of bubblewrap's that said said,
// where it is known: in a container, what the engine withholds, which no
// install gives back (docs/container.md).
func bwrapHint(said string, root bool) string {
	switch {
	case strings.Contains(said, "Can't mount proc"):
		// The kernel lets a user namespace mount a /proc only where
		// the whole of one is visible, and engines mask parts of it.
		return "/proc is partly masked, as a container engine leaves it, and bubblewrap mounts a /proc of its own only where none of it is (Podman: --security-opt unmask=/proc/*; Docker: --security-opt systempaths=unconfined; docs/container.md)"
	case root && (strings.Contains(said, "Creating new namespace failed") || strings.Contains(said, "RTM_NEWADDR")):
		return containerRoot
	case strings.Contains(said, "new namespace"), strings.Contains(said, "uid map"):
		return "user namespaces are not allowed here: a container engine's seccomp filter (Docker: --security-opt seccomp=unconfined; docs/container.md), or the kernel (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone)"
	}
	return ""
}

// containerRoot is what mends namespaces that root may not make: root
// without CAP_SYS_ADMIN and CAP_NET_ADMIN, as a container's is.
const containerRoot = "mm runs as root without CAP_SYS_ADMIN and CAP_NET_ADMIN, as in a container: run mm there as a user (--user), or give it both (--cap-add SYS_ADMIN --cap-add NET_ADMIN; docs/container.md)"

// LandlockOnly confines with Landlock whatever else the machine has (the
// tests of Landlock, where bubblewrap is installed too): unconfined when
// the kernel has no Landlock or this program cannot be found again.
func LandlockOnly() *Sandbox {
	abi := landlockABI()
	if abi < 1 {
		return &Sandbox{kind: Unconfined, why: "the kernel has no Landlock"}
	}
	self, err := os.Executable()
	if err != nil {
		return &Sandbox{kind: Unconfined, why: "Landlock: this program cannot be found again: " + err.Error()}
	}
	return &Sandbox{kind: Landlock, self: self, abi: abi}
}

// ABI is the kernel's Landlock ABI when Landlock confines, 0 otherwise.
func (s *Sandbox) ABI() int { return s.abi }

// Kind is how this sandbox confines commands.
func (s *Sandbox) Kind() Kind { return s.kind }

// Why says why commands are unconfined, or why Landlock confines them
// rather than bubblewrap; "" with bubblewrap.
func (s *Sandbox) Why() string { return s.why }

// ErrUnconfined is what Wrap answers for a policy that confines when this
// machine cannot.
var ErrUnconfined = errors.New("commands cannot be confined here")

// Wrap makes cmd run under p: its Path and Args become those of what
// confines it (bubblewrap, or this program as Landlock's helper), which
// runs the original command in cmd.Dir, as p.User when set, with the
// environment p.Env lets through (environ) and a seccomp filter. net, when
// not nil and p.Network is on, is the session's own network (NewNetwork):
// the command reaches the outside through it and not this machine's
// loopback; nil leaves it the machine's network.
//
// It returns started, which the caller must call once cmd.Start has
// returned, whatever it returned: it closes what only the start needed
// (the descriptors handed to bubblewrap). A policy that confines nothing
// leaves cmd alone. On a machine that cannot confine, it returns an error
// wrapping ErrUnconfined and leaves cmd alone: the caller decides whether
// the command may run anyway. Run by root, it refuses a policy with no
// User: a confined command must hold less than mm.
func (s *Sandbox) Wrap(cmd *exec.Cmd, p Policy, net *Network) (started func(), err error) {
	nothing := func() {}
	if !p.Confined() {
		return nothing, nil
	}
	if s.kind == Unconfined {
		return nothing, fmt.Errorf("%w: %s", ErrUnconfined, s.why)
	}
	if p.User == nil && os.Geteuid() == 0 {
		return nothing, ErrRoot
	}
	if !p.Network {
		net = nil
	}
	var netPid int
	var dns string
	if net != nil {
		if netPid, dns, err = net.ensure(); err != nil {
			return nothing, err
		}
	}
	if s.kind == Landlock {
		return nothing, s.wrapLandlock(cmd, p, netPid)
	}
	return s.wrapBubblewrap(cmd, p, netPid, dns)
}

// ErrRoot is Wrap's answer to a policy that would run a command as root.
var ErrRoot = errors.New("a confined command would run as root: mm runs as root, and no user is named to run commands as (sandbox.user)")

// resolved returns the absolute, link-free forms of paths that exist, each
// once, parents before their children (so that a child's mount is not
// covered by its parent's).
func resolved(paths []string) []string {
	var out []string
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			continue
		}
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	return out
}

// protected are the paths at the top of the folders dirs that patterns
// name (a pattern's matches there, and the folder of a "name/**" one).
// Patterns that name a deeper path are not looked for.
func protected(dirs, patterns []string) []string {
	var out []string
	for _, d := range dirs {
		for _, p := range patterns {
			p = strings.TrimSuffix(p, "/**")
			if p == "" || strings.Contains(p, "/") {
				continue
			}
			m, _ := filepath.Glob(filepath.Join(d, p))
			out = append(out, m...)
		}
	}
	return out
}

// within says whether path is dir or inside it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func oneLine(out []byte, err error) string {
	s := strings.Join(strings.Fields(string(out)), " ")
	if s == "" {
		return err.Error()
	}
	return s
}
