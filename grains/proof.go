package grains

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"hash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/mm-agent/mm/grains/grainspb"
)

// A member is not an owner. The cluster's certificate proves that a peer
// is a node, not whose requests it carries: a node takes an owner from
// another only with a proof made with that owner's token. Every node has
// the tokens (serve.tokens, the same config everywhere), so that each
// message between a client's edge and the nodes running its sessions
// carries a proof, made with its connection's key:
//
//	connection key = HMAC-SHA256(owner's token, label ‖ owner ‖ edge's address ‖ id)
//	proof          = HMAC-SHA256(connection key, message type ‖ recipient ‖ the message without its proof)
//
// The message is its deterministic protobuf encoding without the proof,
// so the proof covers
// every field: the session, the request and its params, the sequence
// number, the connection answers go to. The recipient is the actor it is
// sent to (a link, an edge, a session's actor), or none for a Call, which
// the cluster routes by its session id (in the message). The receiving
// node checks the proof (hmac.Equal, constant time) before it acts, and
// drops and logs a message whose proof does not check. So a member that
// has no token of an owner's can neither act as that owner nor write to
// that owner's connections; it can send again, unchanged, a call it was
// sent itself (a member the cluster places sessions on), which then goes
// to the same session, for the same client, whose node gets the answers.

//
// A message made on this node for an actor on it never crosses the wire
// (protoactor hands it over in process), and needs no HMAC of its own:
// its proof is the connection's in-process proof, an HMAC of the
// connection key made once with the node's own 32 random bytes
// (Owners.local, made as it starts). It only ever goes to actors at this
// node's address, in process, so that no other node, nor anything
// outside the process, ever sees it; it is one connection's, as the key
// is. A message that came over the wire to an actor here checks against
// it only if its sender knew it.

// connLabel begins what a connection key is made of.
const connLabel = "mm cluster connection v1"

// Owners are the tokens of this node's serve.tokens, by owner: whose
// proofs it can make and check.
type Owners struct {
	tokens map[string][]byte
	// here is this node's address once it is a member (Here); local is
	// the proof of a message made here for an actor here.
	here  atomic.Pointer[string]
	local []byte
}

// NewOwners makes Owners of tokens (owner name → token).
func NewOwners(tokens map[string]string) *Owners {
	o := &Owners{tokens: make(map[string][]byte, len(tokens)), local: make([]byte, sha256.Size)}
	for name, t := range tokens {
		o.tokens[name] = []byte(t)
	}
	if _, err := rand.Read(o.local); err != nil {
		panic(fmt.Sprintf("grains: no random bytes for the node's own proof: %v", err))
	}
	return o
}

// Here says this node's address (its actor system's): a message made
// here for an actor at it is proved with the node's own proof.
func (o *Owners) Here(address string) { o.here.Store(&address) }

// key is the key of the client connection conn of owner; nil when no
// token here names owner.
func (o *Owners) key(owner string, conn *grainspb.Conn) *secret {
	t, ok := o.tokens[owner]
	if !ok || conn == nil {
		return nil
	}
	h := hmac.New(sha256.New, t)
	for _, s := range []string{connLabel, owner, conn.GetAddress(), conn.GetId()} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	k := h.Sum(nil)
	local := hmac.New(sha256.New, o.local)
	local.Write(k)
	return &secret{k: k, o: o, local: local.Sum(nil)}
}

// secret is a connection's key, and the HMACs keyed with it, kept for
// the next message (an HMAC's Reset is cheaper than a new one).
type secret struct {
	k []byte
	// o is the node's Owners, local the connection's in-process proof.
	o     *Owners
	local []byte
	macs  sync.Pool
}

// inProcess says whether to is an actor of this node's: what is sent to
// it stays in the process.
func (s *secret) inProcess(to *actor.PID) bool {
	if to == nil || s.o == nil {
		return false
	}
	here := s.o.here.Load()
	return here != nil && to.Address == *here
}

// prove is m's proof for recipient to (nil: none), made with s: m's proof
// field must be empty (it is set to what this returns).
func (s *secret) prove(to *actor.PID, m proto.Message) []byte {
	if s != nil && s.inProcess(to) {
		return s.local
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil || s == nil {
		// A message of ours that does not encode is a bug, and a
		// connection without a key has no owner here: either proof
		// checks nowhere.
		return nil
	}
	return s.mac(m, to, b)
}

// checks says whether m carries its proof for recipient to, made with s.
// m is only read: a message sent within a node is its sender's, which may
// be sending it again (a call tried again).
func (s *secret) checks(to *actor.PID, m proto.Message) bool {
	if s == nil {
		return false
	}
	r := m.ProtoReflect()
	f := r.Descriptor().Fields().ByName(proofField)
	proof := r.Get(f).Bytes()
	if len(proof) != sha256.Size {
		return false
	}
	if s.inProcess(to) && hmac.Equal(proof, s.local) {
		return true
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return false
	}
	// The message without its proof is its encoding less the proof's
	// field: a message's fields are encoded one after the other, each the
	// same with or without the others.
	head, tail, ok := cut(b, f.Number())
	return ok && hmac.Equal(s.mac(m, to, head, tail), proof)
}

// cut returns the encoding b of a message without its top-level field
// num, in two parts: what comes before it and after; false when b does
// not hold it once and well formed.
func cut(b []byte, num protowire.Number) (head, tail []byte, ok bool) {
	start := -1
	for i := 0; i < len(b); {
		n, typ, l := protowire.ConsumeTag(b[i:])
		if l < 0 {
			return nil, nil, false
		}
		v := protowire.ConsumeFieldValue(n, typ, b[i+l:])
		if v < 0 {
			return nil, nil, false
		}
		if n == num {
			if start >= 0 {
				return nil, nil, false
			}
			start, head, tail = i, b[:i], b[i+l+v:]
		}
		i += l + v
	}
	return head, tail, start >= 0
}

// mac is the HMAC of message m's type, its recipient to and its encoding
// without its proof, in parts.
func (s *secret) mac(m proto.Message, to *actor.PID, parts ...[]byte) []byte {
	h, _ := s.macs.Get().(hash.Hash)
	if h == nil {
		h = hmac.New(sha256.New, s.k)
	} else {
		h.Reset()
	}
	defer s.macs.Put(h)
	var buf [128]byte
	hdr := append(buf[:0], m.ProtoReflect().Descriptor().FullName()...)
	hdr = append(hdr, 0)
	if to != nil {
		hdr = append(append(append(hdr, to.Address...), 0), to.Id...)
	}
	h.Write(append(hdr, 0))
	for _, b := range parts {
		h.Write(b)
	}
	return h.Sum(nil)
}

// proofField is the field that holds a message's proof.
const proofField = "proof"

// refusals logs what a node refused, at most refusalBurst lines a
// minute, so that a peer that sends nothing but forgeries cannot fill
// the log; the lines left out are counted in the next one.
type refusals struct {
	log *slog.Logger

	mu      sync.Mutex
	since   time.Time
	logged  int
	dropped int
}

const refusalBurst = 10

func (r *refusals) say(msg string) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.since) > time.Minute {
		r.since, r.logged = now, 0
	}
	if r.logged >= refusalBurst {
		r.dropped++
		r.mu.Unlock()
		return
	}
	r.logged++
	dropped := r.dropped
	r.dropped = 0
	r.mu.Unlock()
	if dropped > 0 {
		msg += fmt.Sprintf(" (and %d more refused before this, not logged)", dropped)
	}
	r.log.Warn("cluster: refused " + msg)
}
