package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/logs"
	"github.com/mm-agent/mm/protocol"
)

// Node is mm serve as a node of a cluster (grains.Node): a member that
// hosts session grains, and the edge its own connections' sessions go
// through.
type Node interface {
	// System is the node's actor system, which its hub's runtime runs in:
	// the sessions' actors are the cluster's grains.
	System() *actor.ActorSystem
	// Join makes the node, hosting hub's sessions for the clients of
	// tokens (owner → token), a member; it is Ready once it sees itself.
	Join(hub *protocol.Hub, roots []string, tokens map[string]string, cfg *configs.Config, reg prometheus.Registerer) error
	Ready() bool
	// Forward makes the Forwarder of a connection of owner.
	Forward(owner string) protocol.NewForwarder
	// Drain waits for the turns of other nodes' clients running here.
	Drain(ctx context.Context)
	// Leave leaves the cluster within timeout.
	Leave(timeout time.Duration)
	// Rejoin is closed once the cluster counted this node out for good:
	// mm serve then drains, leaves and starts again (startAgain).
	Rejoin() <-chan struct{}
	// Tag and Peer make the node the server's serve.Peers: a request for
	// a connection another node holds goes on to that node.
	Tag() string
	Peer(tag string) (url string, certSHA256 []byte, ok bool)
	// Advertise tells the other nodes, once joined, where this one serves
	// /acp: its port and its certificate (nil for plain http).
	Advertise(port int, cert []byte)
}

// NewNode makes a cluster node, before the hub whose sessions it hosts.
type NewNode func(log *slog.Logger) Node

// NodeBinary is the name of the binary that is mm plus the cluster.
const NodeBinary = "mm-node"

// handOffEnv names, in mm-node's environment, the binary mm handed off
// to; mm-node removes it (Run), so that nothing it starts inherits it.
const handOffEnv = "MM_HANDED_OFF_TO"

// handOff is mm serve, in the binary that links no cluster, once the
// config names one: it becomes mm-node (exec, as git runs its git-*
// commands), with the same arguments, environment, standard files and pid,
// so that a supervisor or container engine sees no difference. mm-node is
// looked for next to this binary, then on PATH, and must be of this mm's
// version.
func handOff(args []string, stderr io.Writer) int {
	log := logs.New(stderr, slog.LevelInfo)
	if p := os.Getenv(handOffEnv); p != "" {
		// An "mm-node" that is an mm (a copy, a link) would hand off to
		// itself for ever.
		log.Error(fmt.Sprintf("cluster.name is set: %s links no cluster either: it is an mm, not mm-node; build mm-node with `go build -o DIR/ ./cmd/mm ./cmd/mm-node` (docs/cluster.md)", p))
		return 1
	}
	path, err := nodeBinary()
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	out, err := exec.Command(path, "--version").Output()
	if v := strings.TrimSpace(string(out)); err != nil || v != protocol.Version {
		if err != nil {
			v = err.Error()
		}
		log.Error(fmt.Sprintf("cluster.name is set: %s is not this mm's mm-node (it answers --version %q, this mm is %s): build both from one tree, `go build -o DIR/ ./cmd/mm ./cmd/mm-node` (docs/cluster.md)", path, v, protocol.Version))
		return 1
	}
	log.Info("serve: cluster.name is set: this mm links no cluster; running " + path + " (mm with the cluster)")
	argv := append([]string{path, "serve"}, args...)
	err = syscall.Exec(path, argv, append(os.Environ(), handOffEnv+"="+path))
	log.Error(fmt.Sprintf("cluster.name is set: running %s: %v", path, err))
	return 1
}

// nodeBinary finds mm-node: next to this binary, else on PATH.
func nodeBinary() (string, error) {
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	dir := "?"
	if err == nil {
		dir = filepath.Dir(self)
		next := filepath.Join(dir, NodeBinary)
		if fi, err := os.Stat(next); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return next, nil
		}
	}
	if p, err := exec.LookPath(NodeBinary); err == nil {
		return p, nil
	}
	return "", errors.New("cluster.name is set, and this mm links no cluster: a cluster node runs " + NodeBinary +
		" (mm with the cluster), which is neither next to this mm (" + dir + ") nor on PATH; build both with `go build -o DIR/ ./cmd/mm ./cmd/mm-node` (the release archives and the container image have both; docs/cluster.md)")
}
