package protocol

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/jsonrpc"
)

// A Caller is a client as the hub's sessions know it: whose requests they
// are (the token, owner), which folders its sessions may be in (roots),
// where those sessions write (out) and whom their tools ask (asks). It
// serves the client's session requests — new, load, resume, fork, prompt,
// cancel, mode, config option, close, delete — on the hub, in the order it
// is given them, and is what the session table (registry) attaches a live
// session to.
//
// A connection is a Caller (Agent embeds its own, writing to its outbox).
// On a node of mm's cluster, a client whose connection is on another node
// has a Caller on each node that holds one of its sessions (package
// grains makes it with Hub.NewCaller): its sessions there write to the
// client's link, which carries their updates and answers, typed, to the
// client's node, and their questions to the client come back the same
// way. It reads no JSON-RPC: the client's node decoded the requests.
type Caller struct {
	hub *Hub
	cfg *configs.Config
	log *slog.Logger
	// out is where the sessions the caller holds write, and where its
	// requests are answered; asks is whom their tools ask.
	out  Out
	asks actors.Client
	// owner is the token the client came with (mm serve), "" for mm
	// -acp's; roots are the folders its sessions' cwds must be in (none:
	// any).
	owner string
	roots []string
	// shared is set for a client on a hub it shares with others (mm
	// serve): its sessions outlive it, detached, and can be taken up again.
	shared bool
	// node names this node of a cluster, "" outside one.
	node string
	// ctx is the context of the requests the caller serves (its store
	// reads): the client's lifetime.
	ctx    context.Context
	cancel context.CancelFunc

	// creating counts the session/new and session/fork requests being
	// served, which shutdown waits for; creators bounds them: the caller
	// waits for a free one, so a flood of them slows the reading down.
	creating sync.WaitGroup
	creators chan struct{}
	// inMailbox is set for a remote client's Caller: its requests are
	// served from its sessions' grains' Receive, which must not wait, so
	// a creation waits for its creator on its own goroutine (the client's
	// node slows its reading down itself).
	inMailbox bool

	mu sync.Mutex
	// cwds are the project folders this client has named (new, load,
	// resume, fork, list): where session/delete, which names no folder,
	// looks for a stored session.
	cwds map[string]bool
	// draining is set when the client leaves: no session creation starts
	// any more, and prompts end cancelled; closed once those in flight are
	// done: no session is registered on it any more.
	draining, closed bool
	// conn is the connection's number in the runtime's table (connection),
	// 0 until a session moves to it.
	conn actors.ConnID
}

// Out is where a caller's sessions write and its requests are answered:
// a session's actors.Outbox, and expect, told of each request the caller
// reads before it is served, so that it is answered once (a connection's
// outbox; a cluster's link answers what the client's node expects).
type Out interface {
	actors.Outbox
}

// mcpProcs counts the MCP server processes a session with the editor's
// servers runs: theirs and mcp.servers', those of a command (stdio).
func (c *Caller) mcpProcs(fromEditor []acp.McpServer) int {
	n := 0
	for _, m := range fromEditor {
		if m.Stdio != nil {
			n++
		}
	}
	for _, m := range c.cfg.MCP.Servers {
		if m.Command != "" {
			n++
		}
	}
	return n
}

// roomFor says why the client may not have one more session running mcp
// MCP server processes (nil: it may), before anything is started for it;
// register says it again, under the table's lock.
func (c *Caller) roomFor(mcp int) error {
	return c.hub.sessions.Fits(c.owner, func(sessions, procs int) error { return c.hub.room(c, sessions, procs, mcp) })
}

// newCaller makes a caller of the hub.
func (h *Hub) newCaller(log *slog.Logger, owner string, roots []string, shared bool, node string) *Caller {
	if log == nil {
		log = h.log
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Caller{hub: h, cfg: h.cfg, log: log, owner: owner, roots: roots, shared: shared, node: node,
		ctx: ctx, cancel: cancel, cwds: map[string]bool{}, creators: make(chan struct{}, maxCreating)}
}

// A client of another node: its Caller here (package grains).

// Link is how a client whose connection is on another node of mm's
// cluster is reached from this one (package grains implements it): what
// its sessions here write goes to the client's node, typed, in each
// session's order. Its methods queue and never wait on the client.
type Link interface {
	// Update, Stream and Deliver are the session's, as actors.Outbox says.
	Update(sessionID string, u acp.SessionUpdate)
	Stream(sessionID string, u acp.SessionUpdate, b *actors.Budget, n int)
	Deliver(sessionID string, pid *actor.PID, msg any)
	// UpdateRaw sends a session/update whose update member is raw JSON
	// (what the SDK's types do not hold yet: a notice).
	UpdateRaw(sessionID string, raw json.RawMessage)
	// Answer sends the answer to the client's request r, encoded here:
	// its result (what the SDK's types encode; nil for {}) or its error.
	Answer(sessionID string, r actors.Reply, result any, rerr *acp.RequestError)
}

// CallerOptions are a remote client as its calls proved it (its owner's
// token made their proofs: grains/proof.go).
type CallerOptions struct {
	Log *slog.Logger
	// Owner and Roots are the client's, as ConnOptions says.
	Owner string
	Roots []string
	// Node names this node in the error of a cwd it cannot see.
	Node string
	// Link carries what the client's sessions here write; Asks asks the
	// client (permissions, forms) through its node.
	Link Link
	Asks actors.Client
}

// NewCaller makes the Caller of a client whose connection is on another
// node of the cluster: it serves the client's session requests here, as
// that node decoded them (Serve), and its sessions write to o.Link.
// Each grain gives it its session's requests in its mailbox's order;
// those of different sessions are served at once, as the sessions run.
func (h *Hub) NewCaller(o CallerOptions) *Caller {
	c := h.newCaller(o.Log, o.Owner, o.Roots, true, o.Node)
	c.out, c.asks = linkOut{c: c, link: o.Link}, o.Asks
	c.inMailbox = true
	return c
}

// linkOut is a remote client's Out: the requests it serves were read (and
// are expected) on the client's node, and their answers are encoded here.
type linkOut struct {
	c    *Caller
	link Link
}

func (o linkOut) Update(sid string, u acp.SessionUpdate) { o.link.Update(sid, u) }

func (o linkOut) UpdateRaw(sid string, update json.RawMessage) { o.link.UpdateRaw(sid, update) }

func (o linkOut) Stream(sid string, u acp.SessionUpdate, b *actors.Budget, n int) {
	o.link.Stream(sid, u, b, n)
}

func (o linkOut) Deliver(sid string, pid *actor.PID, msg any) { o.link.Deliver(sid, pid, msg) }

func (o linkOut) Answer(sid string, r actors.Reply, res any) {
	if r.ID.IsZero() {
		return // nobody's (Reopen's)
	}
	result, rerr := o.c.encode(sid, r, res)
	o.link.Answer(sid, r, result, rerr)
}

// Serve serves one decoded request of the client: p is its params as the
// SDK's type (what the method table's decode made of them at the
// client's node), checked again here as the SDK checks them, since nothing
// from another node is trusted; sid is the id the client's node chose for
// a session/new or session/fork. Only a session's requests come here: the
// client's node serves the connection's.
//
// here is the session's actor serving the call: what the request sends
// the session is taken there and then (actors.Here).
func (c *Caller) Serve(method string, id jsonrpc.ID, p any, sid string, here *actors.Here) {
	r := c.request(id, method)
	defer c.survive(method, r)
	m, ok := methods[method]
	if !ok || m.run == nil {
		c.answer("", r, nil, acp.NewMethodNotFound(method))
		return
	}
	if rerr := m.check(p); rerr != nil {
		c.answer("", r, nil, rerr)
		return
	}
	m.run(c, r, p, sid, here)
}

// Refuse answers a request whose params could not be taken from the
// other node's message: invalid params, saying why.
func (c *Caller) Refuse(method string, id jsonrpc.ID, err error) {
	c.answer("", c.request(id, method), nil, acp.NewInvalidParams(map[string]any{"error": err.Error()}))
}

// CancelSession serves the client's session/cancel of session sid; here
// is as Serve's.
func (c *Caller) CancelSession(sid string, here *actors.Here) { c.cancelSession(sid, here) }

// CancelRequest serves the client's $/cancel_request of one of its
// prompts in session sid here: the session finds it among its turns.
func (c *Caller) CancelRequest(sid string, id jsonrpc.ID) {
	if s := c.live(sid); s != nil {
		s.CancelRequest(id)
	}
}

// Reopens says whether a request for session sid would reopen it here
// (Reopen): it is neither live on this connection nor held by another.
func (c *Caller) Reopens(sid string) bool {
	return c.live(sid) == nil && !c.hub.sessions.Holds(sid)
}

// Reopen makes session sid live here again, quietly, before the client's
// next request of it, when it is not live on this hub: the session was on
// a node of the cluster that was lost or left, and its history is in the
// store. p is a session/resume of it. It reports whether it reopened; a
// session that cannot be (another owner's, not stored) is left to the
// request that follows, which says why. here is as Serve's.
func (c *Caller) Reopen(sid string, p acp.ResumeSessionRequest, here *actors.Here) bool {
	if !c.Reopens(sid) {
		return false
	}
	if methods[acp.AgentMethodSessionResume].check(p) != nil || string(p.SessionId) != sid {
		return false
	}
	// Its answer is nobody's: the client did not ask, and its node does
	// not expect it.
	r := actors.NewReply(jsonrpc.ID{}, acp.AgentMethodSessionResume)
	defer c.survive(r.Method, r)
	c.serveResume(r, p, here)
	return true
}

// Close ends a remote client here: it is gone. Its sessions' turns end
// cancelled, and the sessions are left detached, live and loadable.
func (c *Caller) Close() {
	c.markClosed() // at once: nothing waits for answers here
	c.stopTaking()
	c.letGo()
}
