package stress

import (
	"fmt"
	"strings"
	"time"
)

// Config is one harness run.
type Config struct {
	Sessions    int    // sessions to open
	Turns       int    // turns per session (0: open sessions, measure them idle, close them)
	Concurrency int    // turns.concurrency of the runtime
	Procs       int    // 0: in-process; N: N `mm -acp` subprocesses over real pipes
	MM          string // the mm binary (Procs > 0)
	// A served mm: the sessions are spread over Conns WebSocket
	// connections to a running `mm serve` at URL (ws://HOST:PORT/acp; a
	// comma-separated list: the nodes of one cluster, the connections
	// round-robin over them) with Token, or to one the run starts from the
	// mm binary Serve.
	URL   string
	Token string `json:"-"`
	Serve string
	Conns int
	// Nodes > 1 (with Serve): the run starts that many `mm serve` as one
	// cluster on loopback, whose members count a node lost after
	// FailureTimeout. KillNode > 0 (Nodes ≥ 2, Persist): that long into
	// the turns, the last node, which no connection reaches, is killed
	// (SIGKILL). Placement is the cluster's cluster.placement ("" is
	// mm's default, balanced; spread with KillNode).
	Nodes          int
	FailureTimeout time.Duration
	Placement      string
	KillNode       time.Duration
	Latency        time.Duration // scripted model: time to first token
	TokensPerS     float64       // scripted model: token rate (0: instant)
	Words          int           // words in each answer
	Bash           float64       // share of turns that run `bash true`
	Edit           float64       // share of turns that write a file
	Ask            float64       // share of turns whose tool call asks permission (the harness allows)
	Cancel         float64       // share of turns cancelled while `sleep 30` runs in bash
	CancelAfter    time.Duration // delay between the command starting and the cancel
	Fail           float64       // share of turns the model server fails
	Persist        bool          // sessions.enabled
	Seed           uint64        // turn mix seed
	Dir            string        // where the run's folder (config, sessions' cwds; removed after) goes; "" = the system's temp dir
	Progress       bool          // progress bar on stderr
	// Store is store.url (with Persist): the sessions in that Postgres
	// database rather than in files. Not reported: it may hold a password.
	Store string `json:"-"`
}

// Defaults is the standard run: mmstress -sessions 1000 -turns 10 -concurrency 64.
func Defaults() Config {
	return Config{Sessions: 1000, Turns: 10, Concurrency: 64, Conns: 1, Nodes: 1, FailureTimeout: 2 * time.Second,
		Words: 8, CancelAfter: 5 * time.Millisecond, Seed: 1}
}

func (c *Config) validate() error {
	c.Nodes = max(c.Nodes, 1)
	switch {
	case c.Sessions < 1:
		return fmt.Errorf("-sessions must be at least 1")
	case c.Turns < 0:
		return fmt.Errorf("-turns must not be negative")
	case c.Concurrency < 1:
		return fmt.Errorf("-concurrency must be at least 1")
	case c.Procs < 0:
		return fmt.Errorf("-procs must not be negative")
	case c.Procs > 0 && c.MM == "":
		return fmt.Errorf("-procs needs the mm binary (-mm)")
	case c.URL != "" && c.Serve != "":
		return fmt.Errorf("-url drives a running mm serve, -serve starts one: not both")
	case (c.URL != "" || c.Serve != "") && c.Procs > 0:
		return fmt.Errorf("-procs runs mm -acp over pipes: not with -url or -serve")
	case (c.URL != "" || c.Serve != "") && c.Conns < 1:
		return fmt.Errorf("-conns must be at least 1")
	case c.URL != "" && !wsURLs(c.URL):
		return fmt.Errorf("-url must be ws:// or wss:// URLs (…/acp), separated by commas")
	case c.Nodes < 0:
		return fmt.Errorf("-nodes must be at least 1")
	case c.Nodes > 1 && c.Serve == "":
		return fmt.Errorf("-nodes starts a cluster of mm serve: it needs -serve")
	case c.Nodes > 1 && c.FailureTimeout < time.Second:
		return fmt.Errorf("-failure-timeout must be at least 1s (cluster.failureTimeout)")
	case c.Placement != "" && c.Placement != "balanced" && c.Placement != "local" && c.Placement != "spread":
		return fmt.Errorf("-placement is balanced, local or spread (cluster.placement)")
	case c.Placement != "" && c.Nodes < 2:
		return fmt.Errorf("-placement places the sessions of the run's cluster: it needs -nodes 2 or more")
	case c.KillNode > 0 && c.Placement != "" && c.Placement != "spread":
		return fmt.Errorf("-kill-node kills the node no connection reaches, on which -placement %s puts few sessions or none: use spread (its default)", c.Placement)
	case c.KillNode < 0:
		return fmt.Errorf("-kill-node must not be negative")
	case c.KillNode > 0 && c.Nodes < 2:
		return fmt.Errorf("-kill-node kills a node of the run's cluster: it needs -nodes 2 or more")
	case c.KillNode > 0 && !c.Persist:
		return fmt.Errorf("-kill-node: the lost sessions are reopened from the store: it needs -persist")
	case c.URL != "" && c.Token == "":
		return fmt.Errorf("-url needs the server's token (-token or MM_SERVE_TOKEN)")
	case c.Store != "" && !c.Persist:
		return fmt.Errorf("-store keeps persisted sessions: it needs -persist")
	case c.Words < 1:
		return fmt.Errorf("-words must be at least 1")
	case c.Bash+c.Edit+c.Ask+c.Cancel+c.Fail > 1:
		return fmt.Errorf("the shares of bash, edit, ask, cancel and fail add up to more than 1")
	}
	return nil
}

// wsURLs says whether list is one or more ws:// or wss:// URLs, separated
// by commas.
func wsURLs(list string) bool {
	for _, u := range strings.Split(list, ",") {
		u = strings.TrimSpace(u)
		if !strings.HasPrefix(u, "ws://") && !strings.HasPrefix(u, "wss://") {
			return false
		}
	}
	return true
}
