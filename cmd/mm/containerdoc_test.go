package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The container test (container_test.go, build tag "container") runs the
// commands docs/container.md gives, not commands of its own: this file reads
// them out of the page, and checks without any container engine that they
// hold what the page and issue 21 promise.

// containerDoc is the page whose marked commands the container test runs.
const containerDoc = "../../docs/container.md"

// docMarker marks a fenced sh block for the container test: what the block
// is (stdio, serve, serve-min) and the modes it is for.
var docMarker = regexp.MustCompile(`^<!-- container-test: ([a-z-]+)((?: (?:docker|docker-rootless|podman-rootless|podman-rootful))+) -->$`)

// containerModes are the engine and user combinations that need different
// commands, as scripts/container-test.sh tells them apart (MM_CONTAINER_MODE):
//   - docker: Docker whose daemon runs as root (the usual install), called by
//     you or by root; the container's uids are the host's, so --user "$(id
//     -u):$(id -g)" is you;
//   - docker-rootless: Docker's rootless daemon; the container's root is
//     you, so --user 0:0;
//   - podman-rootless: Podman run by a user other than root; the container's
//     uids map onto your subuids, so --userns=keep-id --user "$(id -u):$(id
//     -g)";
//   - podman-rootful: Podman run by root (or the client of a root Podman
//     service); no user namespace, so the Docker form, and keep-id, which
//     only rootless Podman has, is refused.
var containerModes = []string{"docker", "docker-rootless", "podman-rootless", "podman-rootful"}

// modeProgram is the program a mode's commands run: docker or podman.
func modeProgram(mode string) string {
	program, _, _ := strings.Cut(mode, "-")
	return program
}

// docEnv is what the test gives the words a shell would expand.
type docEnv struct {
	home, pwd         string // ~ (and $HOME), $PWD
	uid, gid          int    // $(id -u), $(id -g)
	owner             string // $(stat -c %u:%g "$PWD"): the project's owner, uid:gid
	gitName, gitEmail string // $(git config user.name), $(git config user.email)
	token             string // $(openssl rand -hex 32)
}

// expansions are the only $… the page may use in a marked block.
func (e docEnv) expansions() map[string]string {
	return map[string]string{
		"$PWD":                     e.pwd,
		"$HOME":                    e.home,
		"$(id -u)":                 strconv.Itoa(e.uid),
		"$(id -g)":                 strconv.Itoa(e.gid),
		`$(stat -c %u:%g "$PWD")`:  e.owner,
		"$(git config user.name)":  e.gitName,
		"$(git config user.email)": e.gitEmail,
		"$(openssl rand -hex 32)":  e.token,
	}
}

// docBlock is one marked block: its commands, each as the words a shell
// would hand the program.
type docBlock struct {
	what  string
	modes []string // containerModes
	line  int      // the marker's line in the page
	cmds  [][]string
}

// parseContainerDoc returns the marked blocks of text (docs/container.md),
// with env's values in place of ~ and the $… it knows. Anything it cannot
// read for certain is an error: a malformed marker, a marker without an sh
// block right after it, a marked block twice, shell syntax beyond words and
// quotes, an unknown $….
func parseContainerDoc(text string, env docEnv) ([]docBlock, error) {
	lines := strings.Split(text, "\n")
	var blocks []docBlock
	seen := map[string]int{}
	fenced := false
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t\r")
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.Contains(l, "container-test:") || !strings.HasPrefix(l, "<!--") {
			continue
		}
		m := docMarker.FindStringSubmatch(l)
		if m == nil {
			return nil, fmt.Errorf("line %d: malformed marker %q, want <!-- container-test: WHAT MODE… -->", i+1, l)
		}
		b := docBlock{what: m[1], modes: strings.Fields(m[2]), line: i + 1}
		for _, e := range b.modes {
			key := b.what + " " + e
			if at, dup := seen[key]; dup {
				return nil, fmt.Errorf("line %d: a second block for %q (the first is at line %d)", i+1, key, at)
			}
			seen[key] = i + 1
		}
		if i+1 >= len(lines) || strings.TrimRight(lines[i+1], " \t\r") != "```sh" {
			return nil, fmt.Errorf("line %d: the marker is not followed by a ```sh block", i+1)
		}
		var body []string
		closed := false
		for i += 2; i < len(lines); i++ {
			if strings.HasPrefix(lines[i], "```") {
				closed = true
				break
			}
			body = append(body, strings.TrimRight(lines[i], " \t\r"))
		}
		if !closed {
			return nil, fmt.Errorf("line %d: the block is not closed", b.line)
		}
		cmds, err := shellCommands(body, env.expansions(), env.home)
		if err != nil {
			return nil, fmt.Errorf("the block marked at line %d: %w", b.line, err)
		}
		if len(cmds) == 0 {
			return nil, fmt.Errorf("the block marked at line %d has no command", b.line)
		}
		b.cmds = cmds
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// shellCommands splits the lines of a block into commands (a line, or lines
// joined by a trailing backslash), each into words.
func shellCommands(lines []string, exp map[string]string, home string) ([][]string, error) {
	var cmds [][]string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		for strings.HasSuffix(line, `\`) {
			if i+1 >= len(lines) {
				return nil, fmt.Errorf("the last line ends with a backslash")
			}
			i++
			line = strings.TrimSuffix(line, `\`) + " " + lines[i]
		}
		words, err := shellWords(line, exp, home)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
	}
	return cmds, nil
}

// shellWords splits a command line as a shell would, for what the page
// uses: words, '…' and "…", a leading ~, and the $… of exp. A # starting a
// word starts a comment. Operators, globs, backquotes and any other $… are
// errors.
func shellWords(line string, exp map[string]string, home string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	expand := func(s string) (int, error) {
		keys := make([]string, 0, len(exp))
		for k := range exp {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool { return len(keys[a]) > len(keys[b]) })
		for _, k := range keys {
			if !strings.HasPrefix(s, k) {
				continue
			}
			if rest := s[len(k):]; !strings.HasSuffix(k, ")") && rest != "" && isNameByte(rest[0]) {
				continue // $PWDX is not $PWD
			}
			cur.WriteString(exp[k])
			return len(k), nil
		}
		end := min(len(s), 24)
		return 0, fmt.Errorf("unknown expansion %q…", s[:end])
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
			i++
		case c == '#' && !inWord:
			flush()
			return words, nil
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated '")
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 2
		case c == '"':
			inWord = true
			i++
			for {
				if i >= len(line) {
					return nil, fmt.Errorf(`unterminated "`)
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				switch {
				case c == '\\' && i+1 < len(line) && strings.IndexByte("$`\"\\", line[i+1]) >= 0:
					cur.WriteByte(line[i+1])
					i += 2
				case c == '$':
					n, err := expand(line[i:])
					if err != nil {
						return nil, err
					}
					i += n
				case c == '`':
					return nil, fmt.Errorf("backquotes")
				default:
					cur.WriteByte(c)
					i++
				}
			}
		case c == '$':
			n, err := expand(line[i:])
			if err != nil {
				return nil, err
			}
			inWord = true
			i += n
		case c == '~' && !inWord && (i+1 == len(line) || line[i+1] == '/' || line[i+1] == ' '):
			cur.WriteString(home)
			inWord = true
			i++
		case c == '\\':
			if i+1 >= len(line) {
				return nil, fmt.Errorf("a backslash at the end")
			}
			cur.WriteByte(line[i+1])
			inWord = true
			i += 2
		case strings.IndexByte("|&;<>()`*?[{}", c) >= 0:
			return nil, fmt.Errorf("%q is shell syntax the test does not run", c)
		default:
			cur.WriteByte(c)
			inWord = true
			i++
		}
	}
	flush()
	return words, nil
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// runValueFlags are the options of `ENGINE run` that take a value; runBoolFlags
// those that do not. An option in neither is an error: the test could not
// tell the image from an option's value.
var (
	runValueFlags = map[string]bool{
		"-v": true, "--volume": true, "-w": true, "--workdir": true, "-e": true, "--env": true,
		"-p": true, "--publish": true, "--name": true, "-u": true, "--user": true, "--userns": true,
		"--network": true, "--net": true, "--add-host": true, "--stop-timeout": true, "--env-file": true,
		"--mount": true, "-h": true, "--hostname": true, "--security-opt": true, "--ulimit": true,
		"--device": true, "--cap-add": true, "--cap-drop": true,
	}
	runBoolFlags = map[string]bool{
		"-i": true, "--interactive": true, "-d": true, "--detach": true, "--rm": true,
		"-t": true, "--tty": true, "--init": true, "--read-only": true,
	}
)

// runOpt is one option of `ENGINE run`, kept as written: -e NAME=V is
// {"-e", "NAME=V", true, false}; --network=host is {"--network", "host",
// true, true}; --rm is {"--rm", "", false, false}.
type runOpt struct {
	name, value      string
	hasValue, inline bool
}

// docRun is a marked block read as the test runs it: the folders it makes,
// the variables it exports, and its one `ENGINE run`.
type docRun struct {
	block   docBlock
	mkdirs  []string
	env     []string // NAME=VALUE, from export
	program string   // docker or podman, as written
	opts    []runOpt
	image   string   // as written: mm or IMAGE
	args    []string // mm's arguments, after the image
}

// parseRun reads a block's commands: `mkdir -p DIR…`, `export NAME=VALUE`,
// and one `docker run …` or `podman run …`, after the others.
func parseRun(b docBlock) (docRun, error) {
	r := docRun{block: b}
	for _, c := range b.cmds {
		switch {
		case r.program != "":
			return r, fmt.Errorf("line %d: %q after the run", b.line, strings.Join(c, " "))
		case c[0] == "mkdir" && len(c) > 2 && c[1] == "-p":
			r.mkdirs = append(r.mkdirs, c[2:]...)
		case c[0] == "export" && len(c) == 2 && strings.Contains(c[1], "="):
			r.env = append(r.env, c[1])
		case (c[0] == "docker" || c[0] == "podman") && len(c) > 1 && c[1] == "run":
			r.program = c[0]
			i := 2
			for ; i < len(c) && strings.HasPrefix(c[i], "-"); i++ {
				name, value, inline := strings.Cut(c[i], "=")
				switch {
				case inline && runValueFlags[name]:
					r.opts = append(r.opts, runOpt{name, value, true, true})
				case !inline && runValueFlags[name] && i+1 < len(c):
					r.opts = append(r.opts, runOpt{name, c[i+1], true, false})
					i++
				case !inline && runBoolFlags[name]:
					r.opts = append(r.opts, runOpt{name: name})
				default:
					return r, fmt.Errorf("line %d: option %q: add it to runValueFlags or runBoolFlags (containerdoc_test.go)", b.line, c[i])
				}
			}
			if i >= len(c) {
				return r, fmt.Errorf("line %d: the run names no image", b.line)
			}
			r.image, r.args = c[i], c[i+1:]
			if r.image != "mm" && r.image != "IMAGE" {
				return r, fmt.Errorf("line %d: the image is %q; the test replaces mm or IMAGE with the image it built", b.line, r.image)
			}
		default:
			return r, fmt.Errorf("line %d: %q is not a command the test runs (mkdir -p, export, docker run, podman run)", b.line, strings.Join(c, " "))
		}
	}
	if r.program == "" {
		return r, fmt.Errorf("line %d: no docker run or podman run", b.line)
	}
	return r, nil
}

// docRunFor returns the run of the block marked what for mode (one of
// containerModes).
func docRunFor(text, what, mode string, env docEnv) (docRun, error) {
	blocks, err := parseContainerDoc(text, env)
	if err != nil {
		return docRun{}, err
	}
	for _, b := range blocks {
		if b.what == what && slices.Contains(b.modes, mode) {
			return parseRun(b)
		}
	}
	return docRun{}, fmt.Errorf("no block marked <!-- container-test: %s %s -->", what, mode)
}

// values returns the values of the options named one of names.
func (r docRun) values(names ...string) []string {
	var out []string
	for _, o := range r.opts {
		if slices.Contains(names, o.name) {
			out = append(out, o.value)
		}
	}
	return out
}

// has reports whether the run has the option name (with value, if given).
func (r docRun) has(name string, value ...string) bool {
	for _, o := range r.opts {
		if o.name == name && (len(value) == 0 || o.value == value[0]) {
			return true
		}
	}
	return false
}

// docAdapt is what the test must change in a documented run: the image it
// built, a name of its own, a free host port for the published one, its
// own token, and (on an enforcing SELinux host) :z on the mounts.
type docAdapt struct {
	image, name string
	hostPort    int
	token       string
	selinux     bool
}

// testArgs returns the arguments of `ENGINE run …` the test runs: the
// documented ones, adapted as docs/container.md says (and nothing else).
// -d is left out: the test reads the container's output and exit status.
func (r docRun) testArgs(a docAdapt) ([]string, error) {
	args := []string{"run"}
	named := false
	for _, o := range r.opts {
		v := o.value
		switch o.name {
		case "-d", "--detach":
			continue
		case "--name":
			v, named = a.name, true
		case "-p", "--publish":
			if a.hostPort != 0 {
				parts := strings.Split(v, ":")
				if len(parts) < 2 {
					return nil, fmt.Errorf("-p %s publishes no host port", v)
				}
				parts[len(parts)-2] = strconv.Itoa(a.hostPort)
				v = strings.Join(parts, ":")
			}
		case "-e", "--env":
			if strings.HasPrefix(v, "MM_SERVE_TOKEN=") {
				v = "MM_SERVE_TOKEN=" + a.token
			}
		case "-v", "--volume":
			if a.selinux {
				if strings.Count(v, ":") >= 2 {
					v += ",z"
				} else {
					v += ":z"
				}
			}
		}
		switch {
		case o.inline:
			args = append(args, o.name+"="+v)
		case o.hasValue:
			args = append(args, o.name, v)
		default:
			args = append(args, o.name)
		}
	}
	if !named {
		args = append(args, "--name", a.name)
	}
	args = append(args, a.image)
	args = append(args, r.args...)
	for _, w := range args {
		if strings.Contains(w, "…") {
			return nil, fmt.Errorf("%q is a placeholder the test does not fill", w)
		}
	}
	return args, nil
}

// readDoc returns a file of the repository as text.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testDocEnv has values that cannot be confused with the page's words.
var testDocEnv = docEnv{
	home: "/h/me", pwd: "/h/me/src/app", uid: 4242, gid: 4343, owner: "5151:5252",
	gitName: "Test Name", gitEmail: "test@example.com", token: "t0ken-t0ken-t0ken-t0ken",
}

// TestContainerDocCommands: the blocks the container test runs are in
// docs/container.md, one of each kind for every mode, parse, and say what
// the page and issues 21 and 42 promise: the caller's uid (rootless Podman
// as keep-id with --user, Docker and rootful Podman with --user, rootless
// Docker as the container's root), for a served project its owner, the
// config folder made before it is mounted, the project at its own path,
// git's identity, the smallest serve command as issue 21 gives it with what
// the sandbox needs of each engine, and for a served project what gives it
// bubblewrap (docs/container.md#the-sandbox-in-the-container).
func TestContainerDocCommands(t *testing.T) {
	text := readDoc(t, containerDoc)
	e := testDocEnv
	cfg := e.home + "/.config/mm"
	for _, what := range []string{"stdio", "serve", "serve-min"} {
		for _, mode := range containerModes {
			r, err := docRunFor(text, what, mode, e)
			if err != nil {
				t.Errorf("%s %s: %v", what, mode, err)
				continue
			}
			where := fmt.Sprintf("docs/container.md:%d (%s %s)", r.block.line, what, mode)
			if what == "serve-min" {
				// Issue 21's words, with the tun device of the session's
				// own network, and for Docker a seccomp filter that lets
				// it make a user namespace.
				sandbox := map[string]string{"docker": "--device /dev/net/tun --security-opt seccomp=unconfined", "podman": "--device /dev/net/tun"}[modeProgram(mode)]
				want := modeProgram(mode) + " run -p 8765:8765 " + sandbox + " -e MM_SERVE_TOKEN=… IMAGE serve -listen 0.0.0.0:8765"
				if got := strings.Join(r.block.cmds[len(r.block.cmds)-1], " "); got != want || len(r.block.cmds) != 1 {
					t.Errorf("%s: %q, want %q", where, got, want)
				}
				args, err := r.testArgs(docAdapt{image: "img", name: "n", hostPort: 1234, token: "tok"})
				if err != nil {
					t.Errorf("%s: %v", where, err)
				} else if got, want := strings.Join(args, " "), "run -p 1234:8765 "+sandbox+" -e MM_SERVE_TOKEN=tok --name n img serve -listen 0.0.0.0:8765"; got != want {
					t.Errorf("%s: the test would run %q, want %q", where, got, want)
				}
				continue
			}
			if r.program != modeProgram(mode) {
				t.Errorf("%s: runs %s", where, r.program)
			}
			// As the caller: --user, and for rootless Podman keep-id with
			// it; rootless Docker's root is the caller.
			user, said := fmt.Sprintf("%d:%d", e.uid, e.gid), `"$(id -u):$(id -g)"`
			switch {
			case mode == "docker-rootless":
				user, said = "0:0", "0:0"
			case what == "serve" && mode != "podman-rootless":
				// A served project's owner, which root is not.
				user, said = e.owner, `"$(stat -c %u:%g "$PWD")"`
			}
			if !r.has("--user", user) {
				t.Errorf("%s: no --user %s", where, said)
			}
			if keep := r.has("--userns", "keep-id"); keep != (mode == "podman-rootless") {
				t.Errorf("%s: --userns=keep-id %v, want it with rootless podman only (rootful podman refuses it)", where, keep)
			}
			// The config folder made first, and mounted read-only.
			if !slices.Contains(r.values("-v"), cfg+":/home/mm/.config/mm:ro") {
				t.Errorf("%s: no -v ~/.config/mm:/home/mm/.config/mm:ro", where)
			}
			if !slices.Contains(r.mkdirs, cfg) {
				t.Errorf("%s: no mkdir -p ~/.config/mm before the run", where)
			}
			// The project at its own path, and the working directory.
			if !slices.Contains(r.values("-v"), e.pwd+":"+e.pwd) || !r.has("-w", e.pwd) {
				t.Errorf("%s: the project is not mounted at its own path (-v \"$PWD:$PWD\" -w \"$PWD\")", where)
			}
			// git's identity, from the host's git config.
			for _, v := range []string{"GIT_AUTHOR_NAME=" + e.gitName, "GIT_AUTHOR_EMAIL=" + e.gitEmail,
				"GIT_COMMITTER_NAME=" + e.gitName, "GIT_COMMITTER_EMAIL=" + e.gitEmail} {
				if !slices.Contains(r.values("-e"), v) {
					t.Errorf("%s: no -e %s", where, v)
				}
			}
			if r.has("-t") || r.has("--tty") {
				t.Errorf("%s: a TTY mangles the JSON-RPC", where)
			}
			switch what {
			case "stdio":
				if !r.has("-i") || len(r.args) != 0 {
					t.Errorf("%s: want -i and the image's default argument (-acp), got args %q", where, r.args)
				}
			case "serve":
				if got := strings.Join(r.args, " "); got != "serve -listen 0.0.0.0:8765" {
					t.Errorf("%s: mm's arguments %q, want serve -listen 0.0.0.0:8765", where, got)
				}
				if !r.has("-p", "127.0.0.1:8765:8765") || !r.has("-e", "MM_SERVE_TOKEN") || !slices.Contains(r.env, "MM_SERVE_TOKEN="+e.token) {
					t.Errorf("%s: want -p 127.0.0.1:8765:8765, and -e MM_SERVE_TOKEN exported first", where)
				}
				if !r.has("--stop-timeout", "40") || !r.has("--rm") || !r.has("--name", "mm-serve") {
					t.Errorf("%s: want --stop-timeout 40 (the drain), --rm and --name mm-serve as the page says", where)
				}
				// What the sandbox needs of the engine: the tun device,
				// and what lets bubblewrap mount its /proc.
				want := map[string][]string{
					"podman-rootless": {"--security-opt", "unmask=/proc/*"},
					"podman-rootful":  {"--security-opt", "unmask=/proc/*"},
					"docker":          {"--security-opt", "systempaths=unconfined", "--security-opt", "seccomp=unconfined"},
					"docker-rootless": {"--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN"}, // mm is root there
				}[mode]
				want = append(want, "--device", "/dev/net/tun")
				for i := 0; i < len(want); i += 2 {
					if !r.has(want[i], want[i+1]) {
						t.Errorf("%s: no %s %s (docs/container.md#the-sandbox-in-the-container)", where, want[i], want[i+1])
					}
				}
			}
		}
	}
}

// TestContainerDocTestArgs: what the container test runs is the documented
// run with only the changes the page lists.
func TestContainerDocTestArgs(t *testing.T) {
	r, err := docRunFor(readDoc(t, containerDoc), "serve", "podman-rootless", testDocEnv)
	if err != nil {
		t.Fatal(err)
	}
	args, err := r.testArgs(docAdapt{image: "mm:test", name: "mm-test-1", hostPort: 40001, token: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(args, " ")
	for _, want := range []string{
		"run --name mm-test-1 --rm --userns=keep-id --user 4242:4343 -p 127.0.0.1:40001:8765 -e MM_SERVE_TOKEN --stop-timeout 40 ",
		" -v /h/me/.config/mm:/home/mm/.config/mm:ro -v /h/me/src/app:/h/me/src/app -w /h/me/src/app ",
		" -e GIT_AUTHOR_NAME=Test Name ",
		" mm:test serve -listen 0.0.0.0:8765",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the test would run %q, without %q", got, want)
		}
	}
	if strings.Contains(got, " -d ") {
		t.Errorf("-d is left in: %q", got)
	}
	args, err = r.testArgs(docAdapt{image: "mm:test", name: "n", selinux: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(args, " "); !strings.Contains(got, "-v /h/me/.config/mm:/home/mm/.config/mm:ro,z -v /h/me/src/app:/h/me/src/app:z ") {
		t.Errorf("SELinux: %q", got)
	}
}

// TestContainerDocParser: what the parser cannot read for certain fails
// the test instead of being guessed.
func TestContainerDocParser(t *testing.T) {
	const ok = "<!-- container-test: stdio docker -->\n```sh\nmkdir -p ~/.config/mm # made first\ndocker run -i --rm \\\n  -v \"$PWD:$PWD\" -e 'A=b c' -e X=\"$(id -u)\" mm\n```\n"
	blocks, err := parseContainerDoc(ok, testDocEnv)
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseRun(blocks[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%q %q %q", r.mkdirs, r.values("-v"), r.values("-e")); got != `["/h/me/.config/mm"] ["/h/me/src/app:/h/me/src/app"] ["A=b c" "X=4242"]` {
		t.Errorf("parsed %s", got)
	}
	for _, bad := range []struct{ why, text string }{
		{"unknown $", "<!-- container-test: stdio docker -->\n```sh\ndocker run -v \"$PWDX:/x\" mm\n```\n"},
		{"unknown $(", "<!-- container-test: stdio docker -->\n```sh\ndocker run -e A=$(whoami) mm\n```\n"},
		{"unterminated quote", "<!-- container-test: stdio docker -->\n```sh\ndocker run -e \"A=b mm\n```\n"},
		{"no block", "<!-- container-test: stdio docker -->\n\n```sh\ndocker run mm\n```\n"},
		{"not sh", "<!-- container-test: stdio docker -->\n```json\n{}\n```\n"},
		{"unclosed", "<!-- container-test: stdio docker -->\n```sh\ndocker run mm\n"},
		{"twice", "<!-- container-test: stdio docker -->\n```sh\ndocker run mm\n```\n<!-- container-test: stdio podman-rootless docker -->\n```sh\ndocker run mm\n```\n"},
		{"malformed marker", "<!-- container-test: stdio lxc -->\n```sh\ndocker run mm\n```\n"},
		{"podman without rootless or rootful", "<!-- container-test: stdio podman -->\n```sh\npodman run mm\n```\n"},
		{"pipe", "<!-- container-test: stdio docker -->\n```sh\ndocker run mm | cat\n```\n"},
		{"dangling backslash", "<!-- container-test: stdio docker -->\n```sh\ndocker run mm \\\n```\n"},
		{"empty", "<!-- container-test: stdio docker -->\n```sh\n# nothing\n```\n"},
	} {
		if _, err := parseContainerDoc(bad.text, testDocEnv); err == nil {
			t.Errorf("%s: parsed", bad.why)
		}
	}
	for _, bad := range []struct{ why, cmd string }{
		{"unknown option", "docker run --frobnicate x mm"},
		{"other image", "docker run -i mm:latest"},
		{"no image", "docker run -i --rm"},
		{"other command", "docker pull mm"},
		{"after the run", "docker run mm\nmkdir -p /x"},
		{"no run", "mkdir -p /x"},
	} {
		cmds, err := shellCommands(strings.Split(bad.cmd, "\n"), testDocEnv.expansions(), testDocEnv.home)
		if err != nil {
			t.Fatalf("%s: %v", bad.why, err)
		}
		if _, err := parseRun(docBlock{what: "stdio", modes: []string{"docker"}, cmds: cmds}); err == nil {
			t.Errorf("%s: parsed", bad.why)
		}
	}
	// A placeholder the adaptation does not fill stops the test.
	cmds, _ := shellCommands([]string{"docker run -e OPENAI_API_KEY=… mm"}, nil, "")
	r, err = parseRun(docBlock{cmds: cmds})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.testArgs(docAdapt{image: "i", name: "n"}); err == nil {
		t.Error("a … left in the command was not refused")
	}
}

// fenced is a fenced block of a page, and what the container-test marker
// right before it names, and its modes (none if it is not marked).
type fenced struct {
	body  string
	what  string
	modes []string
}

// fencedBlocks returns the fenced blocks of text whose info string is lang.
func fencedBlocks(text, lang string) []fenced {
	var out []fenced
	var cur []string
	var what string
	var modes []string
	in := false
	prev := ""
	for _, l := range strings.Split(text, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```"+lang:
			in, cur, what, modes = true, nil, "", nil
			if m := docMarker.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
				what, modes = m[1], strings.Fields(m[2])
			}
		case in && strings.HasPrefix(l, "```"):
			in = false
			out = append(out, fenced{strings.Join(cur, "\n"), what, modes})
		case in:
			cur = append(cur, l)
		}
		prev = l
	}
	return out
}

// TestContainerDocEveryCommand: every Podman command on the page, marked or
// not, runs rootless Podman as the caller (keep-id with --user), save the
// blocks marked for rootful Podman only, which run it with --user (the
// caller, or a served project's owner) and without keep-id, and the
// smallest serve command, which runs as the image's user; every command
// makes ~/.config/mm before it mounts it; so does the Dockerfile's comment.
// No build command needs a registry (--pull fails where none is reachable;
// the page says what it is for).
func TestContainerDocEveryCommand(t *testing.T) {
	dockerfile := readDoc(t, "../../Dockerfile")
	var header []string
	for _, l := range strings.Split(dockerfile, "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		header = append(header, strings.TrimSpace(strings.TrimPrefix(l, "#")))
	}
	texts := map[string][]fenced{
		"docs/container.md":    fencedBlocks(readDoc(t, containerDoc), "sh"),
		"the Dockerfile's top": {{body: strings.Join(header, "\n")}},
	}
	for where, blocks := range texts {
		for _, fb := range blocks {
			b := fb.body
			flat := strings.Join(strings.Fields(strings.ReplaceAll(b, "\\\n", " ")), " ")
			rootful := slices.Equal(fb.modes, []string{"podman-rootful"})
			asUser := strings.Contains(flat, `--user "$(id -u):$(id -g)"`) || strings.Contains(flat, `--user "$(stat -c %u:%g "$PWD")"`)
			switch {
			case !strings.Contains(flat, "podman run"), fb.what == "serve-min":
			case rootful && (strings.Contains(flat, "keep-id") || !asUser):
				t.Errorf("%s: rootful podman without --user \"$(id -u):$(id -g)\" (or the served project's owner), or with keep-id, which it refuses:\n%s", where, b)
			case !rootful && !strings.Contains(flat, `--userns=keep-id --user "$(id -u):$(id -g)"`):
				t.Errorf("%s: podman without --userns=keep-id --user \"$(id -u):$(id -g)\" (only a block marked for podman-rootful leaves keep-id out):\n%s", where, b)
			}
			if strings.Contains(flat, " build ") && strings.Contains(flat, "--pull") {
				t.Errorf("%s: a build with --pull, which fails where no registry is reachable:\n%s", where, b)
			}
			if mount := strings.Index(flat, "-v ~/.config/mm:"); mount >= 0 {
				if mk := strings.Index(flat, "mkdir -p ~/.config/mm"); mk < 0 || mk > mount {
					t.Errorf("%s: mounts ~/.config/mm without mkdir -p ~/.config/mm first:\n%s", where, b)
				}
			}
		}
	}
	if h := strings.Join(strings.Fields(strings.Join(header, " ")), " "); !strings.Contains(h, `--userns=keep-id --user "$(id -u):$(id -g)"`) || !strings.Contains(h, "docker build -t mm .") {
		t.Errorf("the Dockerfile's comment does not give rootless Podman's --userns=keep-id --user, or docker build -t mm .:\n%s", strings.Join(header, "\n"))
	}
	doc := readDoc(t, containerDoc)
	for _, want := range []string{"--pull", "-v ~/.gitconfig:/home/mm/.gitconfig:ro", "Author identity unknown",
		"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "mkdir -p ~/.config/mm",
		"embedded defaults"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/container.md does not say %q", want)
		}
	}
}

// TestContainerDocZed: the Zed examples run the container as the caller
// (Podman: keep-id with --user), with the config and git's identity.
func TestContainerDocZed(t *testing.T) {
	engines := map[string]bool{}
	for _, fb := range fencedBlocks(readDoc(t, containerDoc), "json") {
		b := fb.body
		var v struct {
			AgentServers map[string]struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"agent_servers"`
		}
		if err := json.Unmarshal([]byte(b), &v); err != nil {
			t.Errorf("a json block does not parse: %v\n%s", err, b)
			continue
		}
		for name, s := range v.AgentServers {
			engines[s.Command] = true
			where := fmt.Sprintf("docs/container.md, Zed's %q", name)
			joined := " " + strings.Join(s.Args, " ") + " "
			if len(s.Args) == 0 || s.Args[0] != "run" || !strings.Contains(joined, " -i ") || strings.Contains(joined, " -t ") {
				t.Errorf("%s: args %q, want run -i (and no -t)", where, s.Args)
			}
			if !regexp.MustCompile(` --user \d+:\d+ `).MatchString(joined) {
				t.Errorf("%s: no --user UID:GID", where)
			}
			if podman := s.Command == "podman"; podman != strings.Contains(joined, " --userns=keep-id --user ") {
				t.Errorf("%s: --userns=keep-id --user must go with podman, and only with it", where)
			}
			if !strings.Contains(joined, ".config/mm:/home/mm/.config/mm:ro ") || !strings.Contains(joined, "/.gitconfig:/home/mm/.gitconfig:ro ") {
				t.Errorf("%s: want the config and ~/.gitconfig mounted read-only", where)
			}
		}
	}
	if !engines["docker"] || !engines["podman"] {
		t.Errorf("docs/container.md has Zed examples for %v, want docker and podman", engines)
	}
}

// TestDockerfile: the builder is go.mod's Go to the patch release (a stale
// cached golang:1.26 cannot fail the build), base images are named in
// full, the image has ps, git has no
// identity of its own (the agent sees git's error, not a made-up author),
// and mm is the entrypoint with -acp its default argument.
func TestDockerfile(t *testing.T) {
	df := readDoc(t, "../../Dockerfile")
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+\.\d+)$`).FindStringSubmatch(readDoc(t, "../../go.mod"))
	if m == nil {
		t.Fatal("go.mod has no go 1.N.P line")
	}
	from := regexp.MustCompile(`(?m)^FROM docker\.io/library/golang:(\S+) AS build$`).FindStringSubmatch(df)
	if from == nil || !strings.HasPrefix(from[1], m[1]+"-") {
		t.Errorf("the builder is %q, want docker.io/library/golang:%s-… (go.mod's go %s)", from, m[1], m[1])
	}
	// Named in full: Podman resolves short names only through its
	// configuration.
	for _, l := range regexp.MustCompile(`(?m)^FROM \S+`).FindAllString(df, -1) {
		if !strings.HasPrefix(l, "FROM docker.io/") {
			t.Errorf("%q: name the image in full (docker.io/…)", l)
		}
	}
	install := regexp.MustCompile(`apt-get install -y --no-install-recommends ([^\\\n]+)`).FindStringSubmatch(df)
	if install == nil {
		t.Fatal("the Dockerfile has no apt-get install")
	}
	for _, p := range []string{"bash", "git", "procps", "tini", "ca-certificates", "bubblewrap", "slirp4netns"} {
		if !slices.Contains(strings.Fields(install[1]), p) {
			t.Errorf("the image does not install %s: %q", p, install[1])
		}
	}
	for _, not := range []string{"user.name", "user.email", "GIT_AUTHOR", "GIT_COMMITTER"} {
		for _, l := range strings.Split(df, "\n") {
			if !strings.HasPrefix(l, "#") && strings.Contains(l, not) {
				t.Errorf("the image sets git's identity (%s): %q", not, l)
			}
		}
	}
	for _, want := range []string{"\nARG VERSION=\n", "\nENTRYPOINT [\"tini\", \"--\", \"mm\"]\n", "\nCMD [\"-acp\"]\n", "\nEXPOSE 8765\n", "\nUSER 10001:10001\n"} {
		if !strings.Contains(df, want) {
			t.Errorf("the Dockerfile has no %q", strings.TrimSpace(want))
		}
	}
}
