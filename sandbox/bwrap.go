package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// wrapBubblewrap makes cmd run under p through bubblewrap.
//
// Run by mm's own user, bubblewrap makes a user namespace and drops every
// capability before the command runs. Run by root, it needs no user
// namespace and mounts what root may mount (a session's folder under a
// folder only root may search, mm's files in /root); the command is then
// handed to setpriv (or this program as the helper where there is none),
// which runs it as p.User with no capability, no way to gain one
// (no_new_privs) and none in its bounding set. Either way the mounts were
// made in a namespace the command holds no capability over: it can neither
// undo them (umount of a hidden path) nor add its own.
//
// With the network off, the command has a network namespace of its own,
// loopback only, and no socket but socketpair reaches a socket file
// (seccomp). With it on and netPid, the session's own namespace (joined
// with nsenter), its own loopback and slirp4netns to the outside, whose
// DNS server, dns, its /etc/resolv.conf names.
func (s *Sandbox) wrapBubblewrap(cmd *exec.Cmd, p Policy, netPid int, dns string) (started func(), err error) {
	root := os.Geteuid() == 0
	var files []*os.File
	started = func() {
		for _, f := range files {
			f.Close()
		}
	}
	// A command refused is not started, and its caller calls nothing:
	// what it was to be handed is closed here.
	defer func() {
		if err != nil {
			started()
		}
	}()
	fd := func(f *os.File) string {
		files = append(files, f)
		return strconv.Itoa(2 + len(cmd.ExtraFiles) + len(files)) // ExtraFiles start at 3
	}
	// data is a descriptor bubblewrap reads b from: a pipe, which holds
	// the few hundred bytes until bubblewrap reads them, and leaves no
	// file behind.
	data := func(b []byte) (string, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return "", err
		}
		_, err = w.Write(b)
		w.Close()
		if err != nil {
			r.Close()
			return "", err
		}
		return fd(r), nil
	}
	var args []string
	if netPid > 0 {
		args = append(args, nsenterPath(), "--net=/proc/"+strconv.Itoa(netPid)+"/ns/net")
		if !root {
			args = append(args, "--user=/proc/"+strconv.Itoa(netPid)+"/ns/user", "--preserve-credentials")
		}
		args = append(args, "--")
	}
	args = append(args, s.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts")
	if !root {
		// bubblewrap's own user namespace, in which no further one may
		// be made.
		args = append(args, "--unshare-user", "--disable-userns")
	}
	if !p.Network {
		args = append(args, "--unshare-net")
	}
	if p.Mode == Full {
		args = append(args, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc")
	} else {
		// The temporary folders are the command's own, empty; the
		// session's folders are mounted again on top (they may be under
		// /tmp), writable or not.
		args = append(args, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
			"--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/var/tmp")
		bind := "--ro-bind"
		if p.Mode == WorkspaceWrite {
			bind = "--bind"
		}
		made := map[string]bool{}
		for _, w := range resolved(p.Writable) {
			args = append(tmpParents(args, w, made), bind, w, w)
		}
		if p.Mode == WorkspaceWrite {
			for _, r := range resolved(protected(p.Writable, p.Protected)) {
				args = append(args, "--ro-bind", r, r)
			}
		}
	}
	writable, readable := resolved(p.Writable), resolved(p.Readable)
	for _, d := range swapped(p.Hidden) {
		if !slices.ContainsFunc(writable, func(w string) bool { return within(d, w) || within(w, d) }) {
			args = snapshot(args, d)
		}
	}
	for _, h := range outermost(resolved(p.Hidden)) {
		if slices.ContainsFunc(writable, func(w string) bool { return within(h, w) }) {
			continue // hiding it would hide the session's own folder
		}
		fi, err := os.Stat(h)
		switch {
		case err != nil:
		case !fi.IsDir():
			args = append(args, "--ro-bind", "/dev/null", h)
		case slices.ContainsFunc(readable, func(r string) bool { return within(h, r) }):
			// Left writable, the empty folder takes the mount point of
			// the readable one below (its writes stay in the sandbox).
			args = append(args, "--tmpfs", h)
		default:
			args = append(args, "--tmpfs", h, "--remount-ro", h)
		}
	}
	// Mounted last, so that neither the private /tmp nor a hidden folder
	// covers them.
	made := map[string]bool{}
	for _, r := range readable {
		if p.Mode != Full {
			args = tmpParents(args, r, made) // in the private /tmp
		}
		args = append(args, "--ro-bind", r, r)
	}
	if netPid > 0 && dns != "" && p.Mode != Full {
		// Readable by the user the command runs as (bubblewrap makes
		// the file its own, 0600).
		f, err := data([]byte("nameserver " + dns + "\n"))
		if err != nil {
			return started, err
		}
		args = append(args, "--perms", "0644", "--ro-bind-data", f, "/etc/resolv.conf")
	}
	var drop []string
	if p.User != nil {
		if drop, err = s.dropper(*p.User); err != nil {
			return started, err
		}
	}
	// A program that lives in a temporary folder (a test binary, a tool
	// just built there) is still there to run, and so is the helper.
	if p.Mode != Full {
		exes := []string{cmd.Path}
		if len(drop) > 0 {
			exes = append(exes, drop[0])
		}
		for _, r := range resolved(exes) {
			if within("/tmp", r) || within("/var/tmp", r) {
				args = append(tmpParents(args, r, made), "--ro-bind", r, r)
			}
		}
	}
	prog, err := seccompProgram(filter{NoUnix: !p.Network})
	if err != nil {
		return started, err
	}
	if prog != nil {
		f, err := data(seccompBytes(prog))
		if err != nil {
			return started, err
		}
		args = append(args, "--seccomp", f)
	}
	if cmd.Dir != "" {
		dir := cmd.Dir
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			dir = r
		}
		args = append(args, "--chdir", dir)
	}
	home := "/tmp"
	if p.Mode == Full && p.Temp != "" {
		home = p.Temp
	}
	cmd.Env = environ(cmd.Env, envNames(p.Env), p.User, home)
	args = append(args, "--")
	args = append(args, drop...)
	args = append(args, cmd.Path)
	args = append(args, cmd.Args[1:]...)
	cmd.Path, cmd.Args = args[0], args
	cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
	return started, nil
}

// tmpParents adds to args the folders on the way to path inside the
// command's own /tmp or /var/tmp, searchable by anyone (bubblewrap would
// make them as root's alone, and a command run as another user could not
// reach its own folder). made keeps those already added.
func tmpParents(args []string, path string, made map[string]bool) []string {
	var dirs []string
	for d := filepath.Dir(path); d != "/tmp" && d != "/var/tmp" && (within("/tmp", d) || within("/var/tmp", d)); d = filepath.Dir(d) {
		dirs = append(dirs, d)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if !made[dirs[i]] {
			made[dirs[i]] = true
			args = append(args, "--perms", "0755", "--dir", dirs[i])
		}
	}
	return args
}

// dropper is the command line that runs what follows it as u, with no
// capability and no way to gain one: setpriv where it is installed, this
// program as the helper otherwise (a Go program's start costs more).
func (s *Sandbox) dropper(u Ident) ([]string, error) {
	id, gid := strconv.FormatUint(uint64(u.UID), 10), strconv.FormatUint(uint64(u.GID), 10)
	if path, err := exec.LookPath("setpriv"); err == nil {
		return []string{path, "--reuid=" + id, "--regid=" + gid, "--clear-groups",
			"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("neither setpriv nor this program can run a command as %s: %v", u, err)
	}
	return []string{self, dropArg, id + ":" + gid, "--"}, nil
}

// swapped are the folders of the hidden paths that a writer swaps whole
// under a link: a hidden path that is a link beside a ..data link, as the
// kubelet writes a secret or a config map in a pod (node-key.pem ->
// ..data/node-key.pem, ..data -> ..2026_…). The mount that hides such a
// path hides the file it leads to when the command starts; changed in
// place, the secret is a new folder, and ..data leads there.
func swapped(hidden []string) []string {
	var out []string
	for _, h := range hidden {
		d := filepath.Dir(h)
		if !filepath.IsAbs(h) || slices.Contains(out, d) || !isLink(h) || !isLink(filepath.Join(d, "..data")) {
			continue
		}
		out = append(out, d)
	}
	// Parents first: a folder's own empty folder would cover what was
	// mounted inside it (the config map at /etc/mm, its secret at
	// /etc/mm/cluster).
	slices.SortFunc(out, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	return out
}

func isLink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// snapshot mounts folder d as it is now: an empty folder of its own over
// it, read-only, holding d's entries (each mounted again, a link made
// again), so that what is written in d later (a secret's new folder, and
// ..data pointed at it) is not seen. The hidden paths are mounted over
// it next.
func snapshot(args []string, d string) []string {
	entries, err := os.ReadDir(d)
	if err != nil {
		return args // an unreadable folder: its hidden paths are hidden as any
	}
	args = append(args, "--tmpfs", d)
	for _, e := range entries {
		p := filepath.Join(d, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			if target, err := os.Readlink(p); err == nil {
				args = append(args, "--symlink", target, p)
			}
			continue
		}
		args = append(args, "--ro-bind", p, p)
	}
	return append(args, "--remount-ro", d)
}

// outermost are the paths of hidden that no other of them holds: hiding
// a folder hides what it holds, and a mount inside a folder hidden
// read-only could not be made (the config file in ~/.config/mm).
func outermost(hidden []string) []string {
	var out []string
	for _, h := range hidden {
		if !slices.ContainsFunc(hidden, func(o string) bool { return o != h && within(o, h) }) {
			out = append(out, h)
		}
	}
	return out
}

// envNames is sandbox.env, or DefaultEnv when it names nothing.
func envNames(env []string) []string {
	if env == nil {
		return DefaultEnv
	}
	return env
}
