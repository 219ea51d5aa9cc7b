package grains

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/mm-agent/mm/grains/grainspb"
)

// A member is not an owner. The cluster's certificate proves that a peer
// is a node, not whose requests it carries: a node takes an owner from
// another only with a proof made with that owner's token. Every node has
// the tokens (serve.tokens, the same config everywhere), so that each
// message between a client's edge and the nodes running its sessions
// carries a proof, made with its connection's key:
//
//	connection key = HMAC-SHA256(owner's token, label ‖ owner ‖ edge actor's address ‖ id)
//	proof          = HMAC-SHA256(connection key, message type ‖ recipient ‖ the message without its proof)
//
// The message is its deterministic protobuf encoding, so the proof covers
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

// connLabel begins what a connection key is made of.
const connLabel = "mm cluster connection v1"

// Owners are the tokens of this node's serve.tokens, by owner: whose
// proofs it can make and check.
type Owners struct {
	tokens map[string][]byte
}

// NewOwners makes Owners of tokens (owner name → token).
func NewOwners(tokens map[string]string) *Owners {
	o := &Owners{tokens: make(map[string][]byte, len(tokens))}
	for name, t := range tokens {
		o.tokens[name] = []byte(t)
	}
	return o
}

// key is the key of the client connection conn of owner; false when no
// token here names owner.
func (o *Owners) key(owner string, conn *grainspb.Conn) ([]byte, bool) {
	t, ok := o.tokens[owner]
	if !ok || conn == nil {
		return nil, false
	}
	h := hmac.New(sha256.New, t)
	for _, s := range []string{connLabel, owner, conn.GetAddress(), conn.GetId()} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return h.Sum(nil), true
}

// proofField is the field that holds a message's proof.
const proofField = "proof"

// prove is m's proof for recipient to (nil: none) with key: m's proof
// field is left out of what it covers.
func prove(key []byte, to *actor.PID, m proto.Message) []byte {
	r := m.ProtoReflect()
	f := r.Descriptor().Fields().ByName(proofField)
	if f == nil {
		panic(fmt.Sprintf("grains: %s has no proof", r.Descriptor().FullName()))
	}
	if r.Has(f) {
		// A copy without the proof, leaving m as it is: a message sent
		// within a node is the sender's, which may be sending it again.
		c := r.New()
		r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd != f {
				c.Set(fd, v)
			}
			return true
		})
		c.SetUnknown(r.GetUnknown())
		r = c
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Interface())
	if err != nil {
		// A message of ours that does not encode is a bug; its proof then
		// checks nowhere.
		return nil
	}
	h := hmac.New(sha256.New, key)
	h.Write([]byte(r.Descriptor().FullName()))
	h.Write([]byte{0})
	if to != nil {
		h.Write([]byte(to.Address))
		h.Write([]byte{0})
		h.Write([]byte(to.Id))
	}
	h.Write([]byte{0})
	h.Write(b)
	return h.Sum(nil)
}

// checks says whether proof is m's for recipient to with key.
func checks(key []byte, to *actor.PID, m proto.Message, proof []byte) bool {
	if len(key) == 0 || len(proof) != sha256.Size {
		return false
	}
	return hmac.Equal(prove(key, to, m), proof)
}

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
