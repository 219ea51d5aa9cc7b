package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/connect"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/protocol"
	"github.com/mm-agent/mm/serve/servetest"
)

// connectTo starts `mm connect URL` as an editor starts an agent, with env
// added to its environment (a HOME of its own and PATH otherwise), and
// drives it with the Go SDK client over its stdio.
func connectTo(t *testing.T, url string, env ...string) *acptest.Conn {
	t.Helper()
	cmd := exec.Command(mmBin, "connect", url)
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...)
	conn, err := acptest.Process(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close(10 * time.Second)
		if t.Failed() {
			t.Logf("mm connect's stderr:\n%s", conn.Stderr.String())
		}
	})
	return conn
}

// lastLine is the last line of a log.
func lastLine(log string) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	return lines[len(lines)-1]
}

// exitCode is the exit status in a Wait's error (0 for nil, -1 when the
// process did not exit).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// TestConnect: an editor drives a served mm through `mm connect` as it
// drives `mm -acp`: initialize, a session, a turn, a bash turn whose
// permission it answers, a cancelled turn; stdout carries JSON-RPC only,
// and closing stdin ends mm connect with 0, everything answered: not by
// its drain running out (connect.Drain), which says so on stderr.
func TestConnect(t *testing.T) {
	s := startServe(t, "yolo: false\n")
	conn := connectTo(t, s.ws, "MM_TOKEN="+serveToken)
	ctx := testwait.Context(t)

	init, err := conn.Init(ctx)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if init.AgentInfo == nil || init.AgentInfo.Version != protocol.Version {
		t.Errorf("agentInfo %+v", init.AgentInfo)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	sid := sess.SessionId

	resp, err := conn.Ask(ctx, sid, "ping")
	if err != nil || resp.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping: %v %v", resp, err)
	}
	if got := acptest.Text(conn.Client.Updates(sid)); got != "pong" {
		t.Errorf("ping answered %q", got)
	}

	conn.Client.Reset()
	resp, err = conn.Ask(ctx, sid, "bash")
	if err != nil || resp.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("bash: %v %v", resp, err)
	}
	if n := len(conn.Client.Permissions()); n != 1 {
		t.Errorf("%d permission requests, want 1 (yolo is off)", n)
	}
	if got := acptest.Text(conn.Client.Updates(sid)); !strings.Contains(got, "bash said: ran-in-bash") {
		t.Errorf("bash turn said %q", got)
	}

	conn.Client.Reset()
	answered := make(chan acp.PromptResponse, 1)
	go func() {
		resp, err := conn.Ask(ctx, sid, "slow")
		if err != nil {
			t.Errorf("slow: %v", err)
		}
		answered <- resp
	}()
	if err := conn.Client.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
		t.Fatal(err)
	}
	if err := conn.Cancel(ctx, acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-answered:
		if resp.StopReason != acp.StopReasonCancelled {
			t.Errorf("the cancelled turn stopped %q", resp.StopReason)
		}
	case <-ctx.Done():
		t.Fatal("the cancelled turn was not answered")
	}

	start := time.Now()
	if err := conn.Close(testwait.Hang); err != nil {
		t.Fatalf("after stdin closed: %v", err)
	}
	t.Logf("exited %v after stdin closed (connect.Drain %v)", time.Since(start).Round(time.Millisecond), connect.Drain)
	sc := bufio.NewScanner(strings.NewReader(conn.Stdout.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			JSONRPC string `json:"jsonrpc"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.JSONRPC != "2.0" {
			t.Errorf("stdout has a line that is not JSON-RPC: %q", sc.Text())
		}
	}
	if strings.Contains(conn.Stderr.String(), "unanswered") {
		t.Errorf("stderr: %s", conn.Stderr.String())
	}
}

// TestConnectEndOfInput: stdin closing in the middle of a turn is what it
// is for mm -acp: the turn is cancelled and its prompt answered before mm
// connect exits 0, not left to its drain running out (connect.Drain).
func TestConnectEndOfInput(t *testing.T) {
	s := startServe(t, "")
	conn := connectTo(t, s.ws, "MM_TOKEN="+serveToken)
	ctx := testwait.Context(t)
	if _, err := conn.Init(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		resp acp.PromptResponse
		err  error
	}
	answered := make(chan result, 1)
	go func() {
		resp, err := conn.Ask(ctx, sess.SessionId, "slow")
		answered <- result{resp, err}
	}()
	if err := conn.Client.WaitUpdate(ctx, sess.SessionId, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := conn.Close(testwait.Hang); err != nil {
		t.Fatalf("after stdin closed: %v", err)
	}
	t.Logf("exited %v after stdin closed (connect.Drain %v)", time.Since(start).Round(time.Millisecond), connect.Drain)
	if strings.Contains(conn.Stderr.String(), "unanswered") {
		t.Errorf("the drain ran out: %s", conn.Stderr.String())
	}
	// What mm connect wrote is the verdict. acp-go-sdk holds a response
	// until the notifications read before it are handled, and reports
	// "peer disconnected while waiting for pre-response notifications"
	// instead when the stream ends meanwhile: on a loaded machine, the
	// exit that follows the answer at once can come first.
	r := <-answered
	if r.err != nil || r.resp.StopReason != acp.StopReasonCancelled {
		t.Logf("the SDK returned %v %v", r.resp, r.err)
	}
	cancelled := false
	for _, line := range strings.Split(conn.Stdout.String(), "\n") {
		m := gjson.GetMany(line, "method", "result.stopReason")
		cancelled = cancelled || !m[0].Exists() && m[1].String() == string(acp.StopReasonCancelled)
	}
	if !cancelled {
		t.Errorf("mm connect wrote no cancelled answer to the prompt in flight:\n%s", conn.Stdout.String())
	}
}

// TestConnectRefused: a connection that is not made ends mm connect at once
// with one stderr line saying why, a non-zero code and nothing on stdout;
// so does a command line it cannot use.
func TestConnectRefused(t *testing.T) {
	s := startServe(t, "serve:\n  maxConnections: 1\n")
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return "ws://" + ln.Addr().String() + "/acp"
	}()
	full := startServe(t, "serve:\n  maxConnections: 1\n")
	held, _, err := servetest.DialWebSocket(testwait.Context(t), full.ws, serveToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, c := range []struct {
		name string
		args []string
		env  string
		code int
		want string
	}{
		{"a wrong token", []string{s.ws}, "MM_TOKEN=" + serveToken + "x", 1, "mm connect: the server refused the token"},
		{"no token", []string{s.url}, "", 1, "mm connect: the server refused the token: MM_TOKEN is not set"},
		{"no place", []string{full.ws}, "MM_TOKEN=" + serveToken, 1, "mm connect: the server has no place for a connection (503 Service Unavailable)"},
		{"nobody listening", []string{closed}, "MM_TOKEN=" + serveToken, 1, "mm connect: cannot reach 127.0.0.1:"},
		{"TLS to a plain server", []string{"wss" + strings.TrimPrefix(s.ws, "ws")}, "MM_TOKEN=" + serveToken, 1, "does not speak TLS: use ws:// or http://"},
		{"no endpoint", []string{strings.TrimSuffix(s.ws, "/acp") + "/nowhere"}, "MM_TOKEN=" + serveToken, 1, "(404 Not Found)"},
		{"not a WebSocket URL", []string{"ftp://example.com/acp"}, "", 2, "the URL must start with wss://"},
		{"no URL", nil, "", 2, "usage: mm connect"},
		{"two URLs", []string{s.ws, s.ws}, "", 2, "unexpected argument"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(mmBin, append([]string{"connect"}, c.args...)...)
			cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), c.env}
			// stdin stays open: mm connect must end on its own.
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(testwait.Hang):
				_ = cmd.Process.Kill()
				t.Fatalf("mm connect did not exit in %v", testwait.Hang)
			}
			if got := exitCode(err); got != c.code {
				t.Errorf("exit %d, want %d", got, c.code)
			}
			if !strings.Contains(stderr.String(), c.want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), c.want)
			}
			if c.code == 1 && strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("stderr is not one line: %q", stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}

// TestConnectServerGone: a server that goes away in the middle of a session
// — killed, or drained on SIGTERM — ends mm connect with a non-zero code
// and one stderr line saying so, and the editor's request in flight ends
// with the stream.
func TestConnectServerGone(t *testing.T) {
	for _, c := range []struct {
		name string
		sig  syscall.Signal
		want string
	}{
		{"killed", syscall.SIGKILL, "mm connect: the server went away, and the connection could not be resumed: "},
		{"drained", syscall.SIGTERM, "mm connect: the server closed the connection: server shutting down (1001)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startServe(t, "serve:\n  drainTimeout: 1s\n")
			// mm connect tries to resume for its config's
			// serve.resumeTimeout.
			cfg := filepath.Join(t.TempDir(), "connect.yaml")
			if err := os.WriteFile(cfg, []byte("serve:\n  resumeTimeout: 2s\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			conn := connectTo(t, s.ws, "MM_TOKEN="+serveToken, "MM_CONFIG="+cfg)
			ctx := testwait.Context(t)
			if _, err := conn.Init(ctx); err != nil {
				t.Fatal(err)
			}
			sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(t), McpServers: []acp.McpServer{}})
			if err != nil {
				t.Fatal(err)
			}
			if c.sig == syscall.SIGKILL {
				// A turn in flight: its prompt is never answered.
				go func() { _, _ = conn.Ask(ctx, sess.SessionId, "slow") }()
				if err := conn.Client.WaitUpdate(ctx, sess.SessionId, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			err = conn.Wait(testwait.Hang)
			if code := exitCode(err); code < 1 {
				t.Fatalf("mm connect: %v, want a non-zero exit", err)
			}
			if got := lastLine(conn.Stderr.String()); !strings.HasPrefix(got, c.want) {
				t.Errorf("stderr's last line %q, want %q…", got, c.want)
			}
		})
	}
}

// TestConnectSignal: SIGTERM ends mm connect as it ends mm -acp: at once,
// with 0; the server sees the client leave.
func TestConnectSignal(t *testing.T) {
	s := startServe(t, "")
	conn := connectTo(t, s.ws, "MM_TOKEN="+serveToken)
	if _, err := conn.Init(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	if err := conn.Process().Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := conn.Wait(testwait.Hang); err != nil {
		t.Errorf("after SIGTERM: %v", err)
	}
	waitLog(t, s, "closed: the client left", 1)
}

// TestConnectLongLine: a line longer than acp.maxLineBytes is not sent; mm
// connect answers it as mm -acp does, and the connection goes on.
func TestConnectLongLine(t *testing.T) {
	s := startServe(t, "")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("acp:\n  maxLineBytes: 1KiB\nmodel:\n  provider: scripted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := `{"jsonrpc":"2.0","id":7,"method":"session/new","params":{"cwd":"/` + strings.Repeat("x", 2000) + `","mcpServers":[]}}` + "\n"
	init := `{"jsonrpc":"2.0","id":8,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}` + "\n"
	run := func(args ...string) []string {
		cmd := exec.Command(mmBin, args...)
		cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "MM_TOKEN=" + serveToken}
		cmd.Stdin = strings.NewReader(long + init)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mm %v: %v\n%s", args, err, stderr.String())
		}
		return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	}
	local := run("-acp", "-config", cfg)
	remote := run("connect", "-config", cfg, s.ws)
	if len(remote) < 2 || len(local) < 2 {
		t.Fatalf("mm -acp wrote %q, mm connect %q", local, remote)
	}
	if remote[0] != local[0] {
		t.Errorf("mm connect answered the long line\n%s\nmm -acp\n%s", remote[0], local[0])
	}
	if !strings.Contains(remote[0], `"id":7`) || !strings.Contains(remote[0], "acp.maxLineBytes") {
		t.Errorf("the long line's answer: %s", remote[0])
	}
	if !strings.Contains(remote[1], `"id":8,"result"`) {
		t.Errorf("the connection did not go on: %s", remote[1])
	}
}

// TestConnectBackpressure: an editor that stops reading, and reads nothing
// until it is cut, stops mm connect from reading the socket, so the server
// sees a stalled client and cuts it for serve.stallTimeout, as it would a
// WebSocket client of its own. The prompt in flight is lost with the
// connection: once the editor reads again (a laptop woken up), mm connect
// finds the connection gone (404), opens a new one and resumes the
// session, answers that prompt with an error, and the next prompt is
// answered.
func TestConnectBackpressure(t *testing.T) {
	s := startServeBig(t, "serve:\n  stallTimeout: 1s\n")
	conn := connectTo(t, s.ws, "MM_TOKEN="+serveToken)
	ctx := testwait.Context(t)
	if _, err := conn.Init(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	conn.Pause()
	answered := make(chan error, 1)
	go func() {
		_, err := conn.Ask(ctx, sess.SessionId, "big")
		answered <- err
	}()
	waitLog(t, s, "closed: the client read nothing for serve.stallTimeout", 1)
	conn.Resume()
	if err := <-answered; err == nil || !strings.Contains(err.Error(), "the answer to this request was lost") {
		t.Errorf("the prompt of a client cut off: %v, want the error that says its answer was lost", err)
	}
	if r, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Errorf("the next prompt: %v %v\n%s", r, err, conn.Stderr.String())
	}
	if !strings.Contains(conn.Stderr.String(), "(404 Not Found); opened a new connection, resumed 1 session(s)") {
		t.Errorf("mm connect's stderr:\n%s", conn.Stderr.String())
	}
}

// TestConnectTLS: wss:// is checked against the system's roots (here
// SSL_CERT_FILE); a certificate they do not vouch for is refused in one
// line.
func TestConnectTLS(t *testing.T) {
	cert, key := selfSignedFiles(t)
	s := startServe(t, fmt.Sprintf("serve:\n  tls: {cert: %q, key: %q}\n", cert, key))
	if !strings.HasPrefix(s.ws, "wss://") {
		t.Fatalf("mm serve listens on %s", s.url)
	}
	t.Run("trusted", func(t *testing.T) {
		conn := connectTo(t, s.url, "MM_TOKEN="+serveToken, "SSL_CERT_FILE="+cert)
		if _, err := conn.Init(testwait.Context(t)); err != nil {
			t.Fatal(err)
		}
		if err := conn.Close(testwait.Hang); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		conn := connectTo(t, s.ws, "MM_TOKEN="+serveToken)
		if code := exitCode(conn.Wait(testwait.Hang)); code != 1 {
			t.Errorf("exit %d", code)
		}
		if got := conn.Stderr.String(); !strings.HasPrefix(got, "mm connect: the server's TLS certificate is not trusted: ") {
			t.Errorf("stderr: %q", got)
		}
	})
	t.Run("plain to TLS", func(t *testing.T) {
		conn := connectTo(t, "ws"+strings.TrimPrefix(s.ws, "wss"), "MM_TOKEN="+serveToken)
		if code := exitCode(conn.Wait(testwait.Hang)); code != 1 {
			t.Errorf("exit %d: %s", code, conn.Stderr.String())
		}
	})
}

// selfSignedFiles writes a certificate for 127.0.0.1 and its key.
func selfSignedFiles(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	return selfSignedFor(t, []net.IP{net.IPv4(127, 0, 0, 1)})
}

// selfSignedFor is selfSignedFiles for the addresses ips.
func selfSignedFor(t *testing.T, ips []net.IP) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mm connect test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: ips, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestConnectEditorGone: an editor that goes away — it closes mm
// connect's stdin, or it dies in the middle of a turn, its pipes closed
// both ways — ends its connection on the server at once. mm connect closes
// the socket with a close frame (1000, and a reason that says the editor
// is gone), which the server takes for the client's leaving; not a socket
// that vanishes, which the server would take for a network drop and keep
// the connection, and its turn, for serve.resumeTimeout.
func TestConnectEditorGone(t *testing.T) {
	for _, killed := range []bool{false, true} {
		name := map[bool]string{false: "stdin closed", true: "killed mid-turn"}[killed]
		t.Run(name, func(t *testing.T) {
			// A drop would be kept 20 s: long enough to tell from an end.
			s := startServe(t, "serve:\n  resumeTimeout: 20s\n")
			cmd := exec.Command(mmBin, "connect", s.ws)
			cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "MM_TOKEN=" + serveToken}
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderr := &acptest.SyncBuffer{}
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var exit error
			exited := make(chan struct{})
			go func() { exit = cmd.Wait(); close(exited) }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
				if t.Failed() {
					t.Logf("mm connect's stderr:\n%s", stderr.String())
				}
			})
			lines := bufio.NewReader(stdout)
			// until reads stdout up to a line with the members want.
			until := func(want ...string) string {
				t.Helper()
				for {
					line, err := lines.ReadString('\n')
					if err != nil {
						t.Fatalf("stdout ended (%v) before a line with %q", err, want)
					}
					found := true
					for _, w := range want {
						found = found && strings.Contains(line, w)
					}
					if found {
						return line
					}
				}
			}
			send := func(line string) {
				t.Helper()
				if _, err := io.WriteString(stdin, line+"\n"); err != nil {
					t.Fatal(err)
				}
			}
			send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`)
			until(`"id":1,"result"`)
			cwd, _ := json.Marshal(s.project(t))
			send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":` + string(cwd) + `,"mcpServers":[]}}`)
			sid := gjson.Get(until(`"id":2,"result"`), "result.sessionId").String()
			send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"slow"}]}}`)
			until(`"agent_message_chunk"`)
			start := time.Now()
			if killed {
				_ = stdout.Close() // the editor reads no more: mm connect's writes fail
			}
			_ = stdin.Close()
			if !killed {
				until(`"id":3,"result"`, `"cancelled"`)
			}
			select {
			case <-exited:
				t.Logf("mm connect exited (%v) %v after the editor went", exit, time.Since(start).Round(time.Millisecond))
			case <-time.After(testwait.Hang):
				t.Fatalf("mm connect did not exit %v after its editor went", testwait.Hang)
			}
			waitUntil(t, "the connection closed on the server", func() bool {
				return strings.Contains(s.stderr.String(), "connection of ") && strings.Contains(s.stderr.String(), " closed: ")
			})
			t.Logf("the server closed the connection %v after the editor went", time.Since(start).Round(time.Millisecond))
			log := s.stderr.String()
			if strings.Contains(log, "dropped; the connection waits") || !strings.Contains(log, "closed: the client left") {
				t.Errorf("the server took the editor's leaving for a drop:\n%s", log)
			}
		})
	}
}
