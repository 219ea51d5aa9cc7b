// Package grains makes `mm serve` a member of a protoactor cluster: the
// actor system with remote on cluster.advertise, the provider that finds
// the other members (automanaged, etcd, consul, k8s), the disthash
// identity lookup that places grains, and the kinds it is given. It owns
// membership and its operations — who is a member, readiness, the
// cluster's metrics, protoactor's logs, leaving — not what the grains do.
//
// API:
//
//	m, err := grains.Start(grains.Options{Config: cfg.Cluster, Kinds: kinds, Log: log, Registry: reg})
//	m.Cluster()            // protoactor's cluster: Request, Get
//	m.System()             // the actor system the grains run in
//	m.Address()            // this member's host:port, as PIDs carry it
//	m.Joined()             // for /readyz
//	m.Members()            // live members' addresses
//	m.OnTopology(f)        // f(live, left) at once, then on every change
//	m.CrossNodeRequest(d, err) // a request to a grain on another node, for /metrics
//	m.Leave(ctx)           // graceful: Shutdown(true)
//
// Sessions as grains (host.go, link.go, edge.go, straight.go, back.go):
//
//	sys := grains.NewSystem(log)       // the node's actor system
//	hub := app.NewHub(app.Options{..., System: sys.ActorSystem})
//	owners := grains.NewOwners(tokens)  // serve.tokens: owner → token
//	host := grains.NewHost(hub, roots, owners, log) // its Kind goes to Options.Kinds
//	m, err := grains.Start(grains.Options{..., Kinds: ..., System: sys})
//	host.Watch(m)                      // after Start
//	edge := grains.NewEdge(m, hub, owners, budget, log)
//	hub.Connect(protocol.ConnOptions{..., Forward: edge.Forwarder(owner)})
//	host.Drain(ctx); host.Close()      // on SIGTERM, before Leave
//
// A session is a grain of kind "session" whose identity is its id, and the
// grain is the session's actor: the node's runtime runs in the member's
// actor system, the kind spawns a session that opens
// (actors.Runtime.GrainProps), and the first request for a session gives
// it its handle and its state as plain data — a session/new or a fork its
// new state, a load or a resume its stored one, a prompt for a session
// whose node was lost its stored one first (protocol.Caller.Reopen). One
// actor, one Receive (the session's, which hands the clients' calls to
// the Host: actors.Calls), one mailbox, its order the session's; a
// PoisonPill the cluster sends it (its identity moved, its node leaving)
// is taken as a drain: it answers what it took, then stops.
//
// The edge (the node holding the client's connection) decodes each request
// of a session once (protocol's method table) and sends it to the grain as
// a grainspb.Call that carries its params as the client sent them
// (calls.go), one at a time per session, in read
// order, numbered per connection; it tries a call until a grain takes it
// or the budget ends, then answers the request with an error. A cancel
// whose session's actor is known goes to it straight (grainspb.Cancel), at
// the priority that puts it ahead of the stream in its mailbox. The grain
// answers grainspb.Accepted at once (naming itself and the client's link),
// serves each call once (a call sent again has a seq it has seen) through
// the client's link on its node, and never holds a request for a turn. A
// prompt to a session whose actor the edge knows goes straight to it, the
// edge's PID its sender: the grain says it took it in the link's Outs
// (Out.accepted), ahead of what the session writes, so that a turn's call
// crosses once and waits for no answer of its own; the lane sends the
// session nothing else until then. One not taken (the node is leaving:
// Accepted again; the actor is gone: protoactor's dead letter; nothing
// within straightWait) is sent again through the cluster, with its seq.
//
// A member is not an owner (proof.go). Every message between a client's
// edge and the nodes that run its sessions (Call, Cancel, Gone, Answer,
// Credit, Delivered one way; Outs the other) carries a proof, an
// HMAC made with its connection's key, itself an HMAC keyed by the token
// of the connection's owner (serve.tokens: every node has them); it
// covers the message, its type and its recipient. A node checks it
// before it acts: a call whose owner no token names, or whose proof does
// not check, is answered Accepted.Refused, runs nothing and is logged;
// anything else is dropped and logged. The edge's name (its PID's id) is
// random, so each connection's key is its own.
//
// The link (link.go) is a client connection's end on a node that runs
// some of its sessions: a protocol.Caller — the client as the hub's
// session code knows it: owner, roots, where its sessions write, whom they
// ask — and the way back. What its sessions write goes to the client's
// edge as grainspb.Out items, typed and in each session's order: a
// text chunk as its text, any other update as the SDK's JSON of it, an
// answer as its encoded result or error, a question to the client as its
// params, a question given up as its waiter. The link's actor sends what
// waits in its queue as one grainspb.Outs (what is written while a flush
// is on its way goes in it: one proof and one message for many); the
// edge puts each item in the connection's own ordered outbox
// (protocol.Sink), parsing nothing. Streamed output holds its session's
// budget until the edge has written it and sent a grainspb.Credit back,
// one for each batch of a session's written bytes (actors.CreditBatch);
// the client's answers to the sessions' questions come back as
// grainspb.Answer. When a node leaves the membership, the edge fails the
// requests in flight there (NodeLost) and drops what that node still
// sends (giving its credits back); the host closes the links of clients
// whose node left, and a link closed (grainspb.Gone: the client left)
// cancels its sessions' turns and leaves them live, detached. A grain
// that no request gave a session stops after a minute.
//
// Files: member.go (NewSystem, Start, the topology, Leave, the nodes'
// mutual TLS on the remote), provider.go (each provider from its config),
// automanaged.go (mm's automanaged provider: the health endpoint and the
// polls, over mutual TLS with cluster.tls),
// metrics.go, log.go (protoactor's lines on mm's logger), proof.go (the
// owners' proofs), calls.go (a
// request to and from its Call), host.go (the grains), link.go (a client's
// link on a session's node), edge.go (the forwarders: a connection's calls to its
// sessions' grains), straight.go (a prompt sent straight to its session's
// actor: its acceptance, or its sending again), requests.go (the client's requests as the edge
// handed them on: notes in the connection's table), back.go (what comes
// back, into the connection), stream.go (the stream: a turn's prompt
// and its session's Outs between two nodes over a connection of mm's own,
// with the cluster's TLS, instead of the remote: its listener and
// readers; streampeer.go, its dialing side and writers; docs/cluster.md),
// peers.go (where each member serves ACP, gossiped, for a request that
// lands on the wrong node: serve.Peers), load.go (each member's count of
// sessions, gossiped, and the balanced placement it decides: whether a
// session a client opens stays on the client's node), grainspb (the
// messages between nodes; go generate).
//
// Membership. Start returns once protoactor's StartMember has (about a
// second). Joined is true from then on while the last topology lists this
// node's address, until Leave begins; on Kubernetes a pod is listed only
// once it is ready, so there Joined is true once Start has returned. The
// member reads each topology after the identity lookup has taken it: when
// Joined says yes, grains are placed with the members it lists. A member
// the provider stops listing is gone for this node, and protoactor blocks
// its id for good: a node that comes back is a new member (new id, maybe
// the same address). cluster.failureTimeout bounds how long a member that
// died is still listed: automanaged polls the peers' health endpoints four
// times in it, consul's check TTL is it, and a member whose gossip
// heartbeat is older is blocked under any provider (etcd's lease is
// protoactor's 3 s; Kubernetes watches its pods).
//
// Metrics (Options.Registry): mm_cluster_members (gauge),
// mm_cluster_grains{kind} (gauge: the identity lookup's own count of the
// grains it activated here, less those stopped — no hook to call),
// mm_cluster_requests_total{outcome} and mm_cluster_request_seconds (what
// CrossNodeRequest is told), mm_cluster_sessions_placed_total{where} (what
// NewSessionID chose: here or any).
//
// Logs. protoactor logs through Options.Log, tagged lib=protoactor, at
// warn and above; the lines a normal join, leave or peer loss brings are
// taken down to debug (log.go says which). Nothing is written to stdout:
// the automanaged provider's own endpoint would print its start there, so
// mm serves the endpoint itself (provider.go).
//
// Concurrency. Every method may be called from any goroutine. OnTopology
// handlers run on one goroutine of the member's, one call at a time, in
// order, never inside protoactor: they may call the cluster, and while one
// runs, changes gather for its next call. Leave stops that goroutine
// first, then shuts protoactor down; later calls return at once.
//
// What protoactor (the version mm pins) does not guarantee, seen here:
// its disthash lookup swaps its placement table without a lock, so a
// Request racing a topology change may fail (the race detector flags it);
// two members in one process race on grpc's global logger, so mm runs one
// member per process and tests that need several start processes.
package grains
