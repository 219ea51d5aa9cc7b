package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/grains"
	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/serve/servetest"
)

// testCluster is the nodes of startCluster.
type testCluster struct{ nodes []*node }

// hosts says which node's log says it created, forked or reopened
// session sid.
func (c *testCluster) hosts(sid acp.SessionId) int {
	for i, s := range c.nodes {
		if strings.Contains(s.stderr.String(), "session "+string(sid)+" created") ||
			strings.Contains(s.stderr.String(), "session "+string(sid)+" reactivated") ||
			strings.Contains(s.stderr.String(), "session "+string(sid)+" forked from") {
			return i
		}
	}
	return -1
}

// open opens a session in cwd through w, and returns it with the node
// whose log says it created it.
func (c *testCluster) open(t testing.TB, ctx context.Context, w *wireClient, cwd string) (acp.SessionId, int) {
	t.Helper()
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	waitUntil(t, "the session's node logging it", func() bool { at = c.hosts(res.SessionId); return at >= 0 })
	return res.SessionId, at
}

// sessionOn opens sessions in cwd through w until one lives on a node
// that where takes (50 at most), and returns it.
func (c *testCluster) sessionOn(t testing.TB, ctx context.Context, w *wireClient, cwd, what string, where func(node int) bool) acp.SessionId {
	t.Helper()
	for range 50 {
		if sid, at := c.open(t, ctx, w, cwd); where(at) {
			return sid
		}
	}
	t.Fatalf("no session of 50 landed on %s", what)
	return ""
}

// wireClient is an ACP client of one node whose every line read is kept,
// to count the answers to each request.
type wireClient struct {
	*acptest.Conn
	rec  *acptest.Client
	read *syncbuf.Buffer
}

type teeStream struct {
	servetest.Stream
	r io.Reader
}

func (t teeStream) Read(p []byte) (int, error) { return t.r.Read(p) }

func (s *served) wire(t testing.TB) *wireClient { t.Helper(); return s.wireWith(t, nil) }

// wireWith is wire with the upgrade's extra headers (Acp-Resume: 1).
func (s *served) wireWith(t testing.TB, header http.Header) *wireClient {
	t.Helper()
	ctx := testwait.Context(t)
	ws, _, err := servetest.DialWebSocket(ctx, s.ws, serveToken, header)
	if err != nil {
		t.Fatal(err)
	}
	read := &syncbuf.Buffer{}
	st := teeStream{Stream: ws, r: io.TeeReader(ws, read)}
	rec := acptest.NewClient()
	conn := acptest.Dial(rec, st, st)
	t.Cleanup(func() { _ = ws.Close() })
	if _, err := conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	return &wireClient{Conn: conn, rec: rec, read: read}
}

// answers counts the responses read, by id.
func (w *wireClient) answers() map[string]int {
	n := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(w.read.String()))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		id := gjson.GetBytes(sc.Bytes(), "id")
		if id.Exists() && !gjson.GetBytes(sc.Bytes(), "method").Exists() {
			n[id.Raw]++
		}
	}
	return n
}

func (w *wireClient) ask(ctx context.Context, sid acp.SessionId, text string) (acp.PromptResponse, error) {
	return w.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
}

// TestClusterNodeLost: three nodes; a client on node 0 opens sessions
// until some live on every node, and runs turns on all of them. Node 2 is
// killed (kill -9) in the middle of a turn: that prompt answers the
// node-lost error, every other prompt is answered exactly once, a load
// through another node replays every answered turn, and new prompts work,
// the session reopened on a live node. Then node 1 is stopped (SIGTERM)
// under load: every turn it ran finishes, nothing is lost, and its
// sessions go on elsewhere. It runs with the file store on the shared
// folder and with Postgres (store.url).
func TestClusterNodeLost(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	t.Run("files", func(t *testing.T) { clusterNodeLost(t, "sessions:\n  enabled: true\n") })
	t.Run("postgres", func(t *testing.T) {
		clusterNodeLost(t, fmt.Sprintf("sessions:\n  enabled: true\nstore:\n  url: %q\n", pg.URL(t)))
	})
}

func clusterNodeLost(t *testing.T, extra string) {
	c := &testCluster{nodes: startCluster(t, 3, extra)}
	ctx := testwait.Context(t)
	w := c.nodes[0].wire(t)
	project := c.nodes[0].project(t)
	perNode := map[int][]acp.SessionId{}
	var sids []acp.SessionId
	for len(sids) < 40 && (len(perNode[0]) == 0 || len(perNode[1]) < 2 || len(perNode[2]) < 2) {
		res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		sids = append(sids, res.SessionId)
		var at int
		waitUntil(t, "the session's node logging it", func() bool { at = c.hosts(res.SessionId); return at >= 0 })
		perNode[at] = append(perNode[at], res.SessionId)
	}
	t.Logf("%d sessions: %d, %d and %d on nodes 0, 1, 2", len(sids), len(perNode[0]), len(perNode[1]), len(perNode[2]))
	if len(perNode[1]) < 2 || len(perNode[2]) < 2 {
		t.Fatalf("sessions not spread: %v", perNode)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, sid := range sids {
		wg.Go(func() {
			if res, err := w.ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
				t.Errorf("ping on %s (node %d): %v %v", sid, c.hosts(sid), res, err)
			}
		})
	}
	wg.Wait()
	// Each node counts the grains it holds, and node 0 the requests it
	// sent to the others.
	for i, nd := range c.nodes {
		m := nd.metricsOf(t)
		if want := fmt.Sprintf("mm_cluster_grains{kind=\"session\"} %d\n", len(perNode[i])); !strings.Contains(m, want) {
			t.Errorf("node %d's /metrics lacks %q:\n%s", i, want, m)
		}
	}
	if m := c.nodes[0].metricsOf(t); !regexp.MustCompile(`mm_cluster_requests_total\{outcome="ok"\} [1-9]`).MatchString(m) ||
		!regexp.MustCompile(`mm_cluster_request_seconds_count [1-9]`).MatchString(m) {
		t.Errorf("node 0 counted no cross-node request:\n%s", m)
	}
	// What the sessions on nodes 1 and 2 wrote came to node 0 by its
	// stream, one Outs at least for each turn.
	if m, want := c.nodes[0].metricsOf(t), len(perNode[1])+len(perNode[2]); metricValue(m, "mm_cluster_stream_outs_total") < want {
		t.Errorf("node 0 took fewer than %d Outs from its stream:\n%s", want, m)
	}

	// A node that cannot see a session's cwd refuses to host it, saying
	// so (here no node can: one machine cannot show one that can).
	_, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: filepath.Join(project, "elsewhere"), McpServers: []acp.McpServer{}})
	if err == nil || !strings.Contains(err.Error(), "does not exist on mm node 127.0.0.1:") || !strings.Contains(err.Error(), "must be the same path on every node of the cluster") {
		t.Errorf("a cwd the node cannot see: %v", err)
	}

	// A turn in the middle of its answer on node 2, others running too.
	lost, other := perNode[2][0], perNode[2][1]
	lostErr := make(chan error, 1)
	go func() {
		_, err := w.ask(ctx, lost, "slow")
		lostErr <- err
	}()
	waitUntil(t, "the slow turn streaming", func() bool {
		return strings.Contains(acptest.Text(w.rec.Updates(lost)), "thinking")
	})
	for _, sid := range sids {
		if sid == lost {
			continue
		}
		wg.Go(func() {
			// Those on node 2 answer or fail with the node; none is lost.
			res, err := w.ask(ctx, sid, "ping")
			if err != nil && !strings.Contains(err.Error(), grains.NodeLost) {
				t.Errorf("ping on %s (node %d) while node 2 dies: %v", sid, c.hosts(sid), err)
			}
			_ = res
		})
	}
	killed := time.Now()
	if err := c.nodes[2].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lostErr:
		var re *acp.RequestError
		if !errors.As(err, &re) || !strings.Contains(re.Message, grains.NodeLost) {
			t.Fatalf("the turn on the killed node: %v", err)
		}
		t.Logf("the node-lost error came %v after kill -9 (cluster.failureTimeout %s)", time.Since(killed).Round(time.Millisecond), testFailureTimeout)
	case <-time.After(testwait.Hang):
		t.Fatal("the turn on the killed node was never answered")
	}
	wg.Wait()
	for id, n := range w.answers() {
		if n != 1 {
			t.Errorf("request %s answered %d times", id, n)
		}
	}

	// Another node's client loads the lost session: every answered turn.
	w1 := c.nodes[1].wire(t)
	reopened := time.Now()
	if _, err := w1.LoadSession(ctx, acp.LoadSessionRequest{SessionId: lost, Cwd: project, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("load of the lost session through node 1: %v", err)
	}
	t.Logf("the lost session loaded in %v", time.Since(reopened).Round(time.Millisecond))
	if text := acptest.Text(w1.rec.Updates(lost)); !strings.Contains(text, "pong") {
		t.Errorf("the lost session's replay: %q", text)
	}
	if res, err := w1.ask(ctx, lost, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("a new prompt on the lost session: %v %v", res, err)
	}
	// The first client goes on with another session of node 2: reopened.
	reactivated := time.Now()
	if res, err := w.ask(ctx, other, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("a new prompt on another session of the lost node: %v %v", res, err)
	}
	t.Logf("a prompt on a session of the lost node, reactivated on a live one, answered in %v", time.Since(reactivated).Round(time.Microsecond))
	if at := c.hosts(other); at == 2 || at < 0 {
		// hosts finds the first log: the killed node's; the reopening is
		// logged by a live one.
		if !strings.Contains(c.nodes[0].stderr.String()+c.nodes[1].stderr.String(), "session "+string(other)+" reactivated") {
			t.Errorf("session %s was not reactivated on a live node", other)
		}
	}

	// SIGTERM of node 1 with turns running there: all finish.
	// turns.concurrency is 1: one turn streams, the others wait for it.
	steady := perNode[1][:min(3, len(perNode[1]))]
	results := make(chan error, len(steady))
	for _, sid := range steady {
		go func() {
			res, err := w.ask(ctx, sid, "steady")
			if err == nil && res.StopReason != acp.StopReasonEndTurn {
				err = fmt.Errorf("stop reason %s", res.StopReason)
			}
			results <- err
		}()
	}
	waitUntil(t, "a steady turn streaming", func() bool {
		for _, sid := range steady {
			if strings.Contains(acptest.Text(w.rec.Updates(sid)), "steady") {
				return true
			}
		}
		return false
	})
	if err := c.nodes[1].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range steady {
		if err := <-results; err != nil {
			t.Errorf("a turn on the node that was stopped: %v", err)
		}
	}
	if err := c.nodes[1].waitExit(t, "node 1 after SIGTERM"); err != nil {
		t.Errorf("node 1 after SIGTERM: %v", err)
	}
	for _, sid := range steady {
		if res, err := w.ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
			t.Errorf("session %s after its node left: %v %v", sid, res, err)
		}
	}
	for id, n := range w.answers() {
		if n != 1 {
			t.Errorf("request %s answered %d times", id, n)
		}
	}
}

// TestClusterTwoActivations provokes two activations of one session with
// sessions in Postgres: the node running a turn of it is frozen (SIGSTOP),
// the others count it out, and the session's next prompt reactivates it on
// a live node, which saves it. Once thawed, the frozen node's copy ends
// its turn and fails its save (fenced): it stops, says why, and the store
// keeps the live copy's turns only. The turn's model holds the rest of
// its answer until the test lets it go (heldModel), so that the turn is
// under way when the node is frozen, and ends only once it is thawed,
// however slow the machine.
func TestClusterTwoActivations(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	model := newHeldModel(t)
	c := &testCluster{nodes: startClusterModel(t, 2, model.section(), fmt.Sprintf("sessions:\n  enabled: true\nstore:\n  url: %q\n", pg.URL(t)))}
	ctx := testwait.Context(t)
	w := c.nodes[0].wire(t)
	project := c.nodes[0].project(t)
	sid := c.sessionOn(t, ctx, w, project, "node 1", func(n int) bool { return n == 1 })
	if res, err := w.ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping: %v %v", res, err)
	}

	stale := make(chan error, 1)
	go func() {
		_, err := w.ask(ctx, sid, "held")
		stale <- err
	}()
	waitUntil(t, "the held turn streaming", func() bool {
		return strings.Contains(acptest.Text(w.rec.Updates(sid)), "held")
	})
	frozen := c.nodes[1].cmd.Process
	if err := frozen.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = frozen.Signal(syscall.SIGCONT)
		}
	}
	defer thaw()
	select {
	case err := <-stale:
		if err == nil || !strings.Contains(err.Error(), grains.NodeLost) {
			t.Fatalf("the turn on the frozen node: %v", err)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the turn on the frozen node was never answered")
	}
	if res, err := w.ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping after the node was counted out: %v %v", res, err)
	}
	if !strings.Contains(c.nodes[0].stderr.String(), "session "+string(sid)+" reactivated") {
		t.Fatalf("session %s was not reactivated on node 0:\n%s", sid, c.nodes[0].stderr.String())
	}

	thaw()
	model.let()
	waitUntil(t, "the stale copy failing its save", func() bool {
		return strings.Contains(c.nodes[1].stderr.String(), "session "+string(sid)+": another mm took this session over; this copy stopped")
	})
	// What the stale copy streamed after it was counted out never reached
	// the client.
	if text := acptest.Text(w.rec.Updates(sid)); strings.Contains(text, heldRest) {
		t.Errorf("the client got the stale copy's stream: %q", text)
	}
	// The store has the live copy's turns: load it through a new
	// connection, and go on.
	w2 := c.nodes[0].wire(t)
	if _, err := w2.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: project, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("load: %v", err)
	}
	replay := acptest.Text(w2.rec.Updates(sid))
	if strings.Count(replay, "pong") != 2 || strings.Contains(replay, heldRest) {
		t.Errorf("the replay is not the live copy's: %q", replay)
	}
	if res, err := w2.ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("ping after the load: %v %v", res, err)
	}
}

// heldRest is the part of heldModel's "held" answer it holds back.
const heldRest = "and the rest of the held answer"

// heldModel is an OpenAI-compatible model server for the nodes of a
// cluster: a prompt "held" streams its first word and holds the rest
// until let is called (or the request ends); any other prompt is answered
// "pong" at once. A turn is then in the middle of its answer for as long
// as the test needs, on any machine.
type heldModel struct {
	srv     *httptest.Server
	release chan struct{}
	once    sync.Once
}

func newHeldModel(t testing.TB) *heldModel {
	t.Helper()
	m := &heldModel{release: make(chan struct{})}
	m.srv = httptest.NewServer(http.HandlerFunc(m.chat))
	t.Cleanup(func() { m.let(); m.srv.Close() })
	return m
}

// section is the model: section of a node's config that uses m.
func (m *heldModel) section() string {
	return fmt.Sprintf("model:\n  provider: openai\n  baseURL: %s/v1\n  contextWindow: 100000\n  warmUp: false\n", m.srv.URL)
}

// let lets every held answer, and every later one, go to its end.
func (m *heldModel) let() { m.once.Do(func() { close(m.release) }) }

func (m *heldModel) chat(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	prompt := ""
	for _, msg := range gjson.GetBytes(body, "messages").Array() {
		if msg.Get("role").String() == "user" {
			if c := msg.Get("content"); c.IsArray() {
				prompt = c.Get("0.text").String()
			} else {
				prompt = c.String()
			}
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	send := func(delta map[string]string, finish any) bool {
		chunk, _ := json.Marshal(map[string]any{"id": "chatcmpl-held", "object": "chat.completion.chunk", "created": 0, "model": "held",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		if _, err := fmt.Fprintf(w, "data: %s\n\n", chunk); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(map[string]string{"role": "assistant"}, nil) {
		return
	}
	if prompt == "held" {
		if !send(map[string]string{"content": "held "}, nil) {
			return
		}
		select {
		case <-m.release:
		case <-r.Context().Done():
			return
		}
		if !send(map[string]string{"content": heldRest}, nil) {
			return
		}
	} else if !send(map[string]string{"content": "pong"}, nil) {
		return
	}
	if send(map[string]string{}, "stop") {
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// metricValue is the value of a metric without labels in a /metrics
// text, -1 if it is not there.
func metricValue(text, name string) int {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return int(v)
}
