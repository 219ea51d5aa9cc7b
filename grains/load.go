package grains

import (
	"fmt"
	"time"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/grains/grainspb"
)

// Balanced placement (cluster.placement balanced, the default): a node
// keeps the sessions its clients open, as local does, while it holds no
// more of the cluster's sessions than its share and a margin; past that
// it spreads them, as spread does. Each node gossips how many sessions
// live on it (loadKey), whatever its own placement, and reads the
// others' counts as often.
//
// The gossip decides only between here and anywhere: a session that is
// not kept gets any id, and lands on a node by its hash, as with spread.
// So a member that gossips a false count can make the others keep their
// sessions (a high count) or spread them (zero), and nothing else: it
// draws no more sessions to itself than spread would give it.

// loadKey is the gossip key of a member's grainspb.Load.
const loadKey = "mm.load"

// loadEvery is how often a node gossips its count (when it changed) and
// reads the others': about as often as protoactor gossips (every 300 ms).
const loadEvery = 500 * time.Millisecond

// A node keeps a session while its count is at most the members' mean
// plus a quarter of it, or plus balanceSlack when that is more: a few
// sessions more than its share never spread a small cluster's.
const (
	balanceShare = 4 // the margin is mean/balanceShare
	balanceSlack = 8
)

// loadView is what the last gossip said of the other live members' loads.
type loadView struct {
	others int // the members whose count the gossip had
	sum    int // their sessions
	// keep is keeps of this node's count as it was a round before the
	// others' were read, about as old as theirs: in a burst, when every
	// node's count rises faster than the gossip carries it, a node that
	// took its fresh count against the others' older ones would see
	// itself above its share, and spread.
	keep bool
}

// keeps says whether a node with own sessions keeps the next one its
// client opens, when the other members it has counts for hold v's.
func (v loadView) keeps(own int) bool {
	if v.others == 0 {
		return true // no other count yet: nothing to balance against
	}
	mean := v.mean(own)
	return float64(own) <= mean+max(mean/balanceShare, balanceSlack)
}

// mean is the members' mean count, this node's own included.
func (v loadView) mean(own int) float64 { return float64(own+v.sum) / float64(v.others+1) }

// sessions is the number of session grains live on this node.
func (m *Member) sessions() int {
	if ak, ok := m.c.TryGetClusterKind(SessionKind); ok {
		return int(ak.Count())
	}
	return 0
}

// gossipLoad gossips this node's count and reads the others', every
// loadEvery until Leave.
func (m *Member) gossipLoad() {
	defer close(m.loadGone)
	t := time.NewTicker(loadEvery)
	defer t.Stop()
	said, before := -1, 0
	for {
		n := m.sessions()
		if n != said {
			m.c.Gossip.SetState(loadKey, &grainspb.Load{Sessions: uint32(n)})
			said = n
		}
		// The others' counts are a round or so old when they arrive:
		// this node's is taken as old, the one it said a round ago.
		m.readLoads(before)
		before = n
		select {
		case <-m.done:
			return
		case <-t.C:
		}
	}
}

// readLoads takes the live members' counts from the gossip, this node's
// left out, and whether this node, with own sessions, keeps the next ones
// its clients open: a member that left, or one the gossip has no count of
// yet, is not counted.
func (m *Member) readLoads(own int) {
	state, err := m.c.Gossip.GetState(loadKey)
	if err != nil {
		return // protoactor logged it; the last view stands
	}
	var v loadView
	for id, kv := range state {
		if id == m.sys.ID || kv == nil || kv.Value == nil || !m.isMemberID(id) {
			continue
		}
		var l grainspb.Load
		if kv.Value.UnmarshalTo(&l) != nil {
			continue
		}
		v.others++
		v.sum += int(min(l.Sessions, maxCounted))
	}
	v.keep = v.keeps(own)
	// A node keeps its sessions until it has a view: the first that
	// says otherwise is a change too.
	if was := m.loads.Swap(&v); (was == nil || was.keep) != v.keep && m.cfg.Placement == configs.PlacementBalanced {
		share, then := "within its share again", "live here"
		if !v.keep {
			share, then = "more than its share", "are spread"
		}
		m.log.Info(fmt.Sprintf("cluster %s: this node holds %d session(s), %s (the %d member(s) hold %.1f on average): the sessions its clients open %s",
			m.cfg.Name, own, share, v.others+1, v.mean(own), then))
	}
}

// maxCounted bounds the count taken from one member's gossip.
const maxCounted = 1 << 20
