// Package pgtest runs a throwaway PostgreSQL server for tests: initdb in a
// temporary directory, the server on 127.0.0.1 and a free port, stopped and
// its directory removed at the end. As root (CI), the server runs as the
// system user postgres, since initdb refuses to run as root.
//
// A test package holds one Shared, starts it on first use (Shared.Get) and
// stops it in TestMain. Where PostgreSQL is not installed, Get skips the
// test saying why, unless MM_REQUIRE_POSTGRES=1 (.ci/run sets it after
// installing Debian's postgresql), where it fails it.
//
// Concurrency: a Shared and a Server are safe for concurrent use.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mm-agent/mm/internal/testwait"
)

// RequireEnv, set to 1, makes a missing PostgreSQL fail the tests that
// need it instead of skipping them.
const RequireEnv = "MM_REQUIRE_POSTGRES"

// FsyncEnv, set to 1, keeps the server's fsync on: for benchmarks that
// compare it with the file store, which syncs every save. Tests leave it
// off, since nothing they write must outlive the machine.
const FsyncEnv = "MM_PGTEST_FSYNC"

// ErrNotInstalled means no PostgreSQL server binaries were found.
var ErrNotInstalled = errors.New("PostgreSQL is not installed (no pg_ctl in /usr/lib/postgresql/*/bin or on PATH; Debian: apt-get install postgresql)")

// Server is one running throwaway server.
type Server struct {
	dir    string // holds data/, the log and the socket
	bin    string // the folder of initdb and pg_ctl
	listen string // the address it listens on
	port   int
	cred   *syscall.Credential // the postgres user's, when running as root
	n      atomic.Int64        // schemas made
}

// Bin returns the folder of PostgreSQL's server programs: the newest of
// /usr/lib/postgresql/*/bin (Debian keeps them off PATH), or pg_ctl's on
// PATH.
func Bin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNotInstalled
}

// Start makes a database cluster in a new temporary directory and starts
// its server; fsync is off unless MM_PGTEST_FSYNC=1. The server trusts
// local connections as the superuser mm.
func Start() (*Server, error) { return StartWith(Options{}) }

// Options say where a server listens and whom else it lets in.
type Options struct {
	// Listen is the address it listens on; "" is 127.0.0.1.
	Listen string
	// Port is its port; 0 is a free one.
	Port int
	// Trust are networks (CIDR) whose clients it lets in as mm, without
	// a password, beside local ones: a test's pods.
	Trust []string
}

// StartWith is Start, listening and letting in as o says.
func StartWith(o Options) (*Server, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mm-pg-")
	if err != nil {
		return nil, err
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1"
	}
	s := &Server{dir: dir, bin: bin, listen: o.Listen}
	if os.Geteuid() == 0 {
		if s.cred, err = postgresUser(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := s.run("initdb", "-D", s.data(), "-A", "trust", "-U", "mm", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if len(o.Trust) > 0 {
		hba, err := os.OpenFile(filepath.Join(s.data(), "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			for _, n := range o.Trust {
				fmt.Fprintf(hba, "host all mm %s trust\n", n)
			}
			err = hba.Close()
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	fsync := "off"
	if os.Getenv(FsyncEnv) == "1" {
		fsync = "on"
	}
	// A free port may be taken between looking and listening: try again.
	for attempt := 0; ; attempt++ {
		s.port = o.Port
		if s.port == 0 {
			s.port, err = freePort()
		}
		if err == nil {
			err = s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(dir, "log"), "-w", "-t", strconv.Itoa(int(testwait.Hang.Seconds())), "-o",
				fmt.Sprintf("-p %d -k %s -c listen_addresses=%s -c fsync=%s -c max_connections=200", s.port, dir, s.listen, fsync), "start")
		}
		if err == nil {
			return s, nil
		}
		if attempt == 2 {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%w; server log: %s", err, strings.Join(strings.Fields(lastLines(string(log), 5)), " "))
		}
	}
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// URL is the address of the database postgres, as the superuser mm.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://mm@%s/postgres?sslmode=disable", net.JoinHostPort(s.listen, strconv.Itoa(s.port)))
}

// Database makes a new, empty database name. It connects through the
// server's socket, which lets mm in whatever address the server listens
// on.
func (s *Server) Database(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://mm@/postgres?host=%s&port=%d&sslmode=disable", s.dir, s.port))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// Schema makes a new, empty schema and returns the URL whose connections
// use it (search_path), so that each test has tables of its own on the
// shared server.
func (s *Server) Schema(ctx context.Context) (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.n.Add(1))
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", err
	}
	return s.URL() + "&search_path=" + name, nil
}

// Stop stops the server at once (what it held is thrown away) and removes
// its directory.
func (s *Server) Stop() error {
	err := s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

// run runs one of the server's programs, as the postgres user when this
// process is root.
func (s *Server) run(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, strings.Join(strings.Fields(lastLines(string(out), 5)), " "))
	}
	return nil
}

// postgresUser is the credential of the user the server runs as under
// root: postgres, which Debian's package creates.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, the server must run as the user postgres: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Shared is the one server of a test package, started by the first test
// that needs it.
type Shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Get returns the server, starting it the first time. When PostgreSQL is
// not installed it skips t, or fails it when MM_REQUIRE_POSTGRES=1; a
// server that is installed but does not start fails t.
func (sh *Shared) Get(t testing.TB) *Server {
	t.Helper()
	sh.once.Do(func() {
		start := time.Now()
		sh.srv, sh.err = Start()
		if sh.err == nil {
			t.Logf("pgtest: PostgreSQL started in %v at %s (%s=%s)", time.Since(start).Round(time.Millisecond), sh.srv.URL(), FsyncEnv, os.Getenv(FsyncEnv))
		}
	})
	switch {
	case errors.Is(sh.err, ErrNotInstalled) && os.Getenv(RequireEnv) != "1":
		t.Skipf("%v; %s=1 makes this a failure (.ci/run sets it)", sh.err, RequireEnv)
	case sh.err != nil:
		t.Fatalf("pgtest: %v", sh.err)
	}
	return sh.srv
}

// URL returns the URL of a new schema of the shared server (Schema), for
// one test.
func (sh *Shared) URL(t testing.TB) string {
	t.Helper()
	srv := sh.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	url, err := srv.Schema(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return url
}

// Stop stops the server if it was started. TestMain calls it after the
// tests ran.
func (sh *Shared) Stop() {
	sh.once.Do(func() { sh.err = errors.New("stopped") })
	if sh.srv != nil {
		if err := sh.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
		sh.srv = nil
	}
}
