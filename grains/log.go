package grains

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// protoLog is the logger of the member's actor system: mm's, tagged
// lib=protoactor, at warn and above, with the lines protoactor logs as
// warnings or errors in the normal course of a cluster's life taken down to
// debug, so that those left say something is wrong:
//
//   - gossip from a member this node does not list: normal for the moment
//     a member joins; a warning (once a minute) only when it lasts longer
//     than the failure timeout, as when this node dropped a member that
//     lives on;
//   - the remote's attempts to reach, and gossip's to reach, a member
//     that has left;
//   - the remote's lost connection to a member that has left, or that this
//     node closed itself (gRPC's Canceled), or any once this node leaves.
//
// Everything else at warn or above is kept as it is.
//
// The logger is made with the actor system, before the member starts
// (NewSystem): until m holds the member, lines are kept as they are.
func protoLog(log *slog.Logger, m *atomic.Pointer[Member]) *slog.Logger {
	return slog.New(&protoHandler{Handler: log.With("lib", "protoactor").Handler(), member: m, seen: &seen{keys: map[string]*seenKey{}}})
}

type protoHandler struct {
	slog.Handler
	member *atomic.Pointer[Member]
	seen   *seen
}

// warnEvery is how often one lasting condition is warned of.
const warnEvery = time.Minute

func (h *protoHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h *protoHandler) Handle(ctx context.Context, r slog.Record) error {
	if l := h.level(r); l != r.Level {
		if !h.Handler.Enabled(ctx, l) {
			return nil
		}
		r = r.Clone()
		r.Level = l
	}
	return h.Handler.Handle(ctx, r)
}

// level returns the level r is logged at.
func (h *protoHandler) level(r slog.Record) slog.Level {
	m := h.member.Load()
	if m == nil {
		return r.Level
	}
	switch r.Message {
	case "Got gossip request from unknown member":
		id, _ := attr(r, "MemberId").(string)
		if h.seen.warn("gossip "+id, m.cfg.FailureTimeout, m.cfg.FailureTimeout) {
			return slog.LevelWarn
		}
		return slog.LevelDebug
	case "EndpointWriter failed to connect", "EndpointWriter failed to create receive stream":
		// protoactor reconnects to a member that left when something is
		// still sent to it (gossip does, for a while).
		addr, _ := attr(r, "address").(string)
		if m.leaving.Load() || !m.isMember(addr) {
			return slog.LevelDebug
		}
	case "sendGossipForMember failed":
		id, _ := attr(r, "MemberId").(string)
		if m.leaving.Load() || !m.isMemberID(id) {
			return slog.LevelDebug
		}
	case "EndpointWriter lost connection":
		// Canceled is this side closing the connection: the peer left,
		// or this node is leaving.
		addr, _ := attr(r, "address").(string)
		err, _ := attr(r, "error").(error)
		if m.leaving.Load() || !m.isMember(addr) || status.Code(err) == codes.Canceled {
			return slog.LevelDebug
		}
	}
	return r.Level
}

// seen remembers conditions that protoactor logs again and again.
type seen struct {
	mu   sync.Mutex
	keys map[string]*seenKey
}

type seenKey struct{ first, last, warned time.Time }

// maxSeen bounds seen: past it, it starts again empty (a peer down for
// good is then warned of once more).
const maxSeen = 1024

// warn says whether the condition key, seen now, deserves a warning: it
// has lasted at least after, and was not warned of in the last warnEvery.
// A condition not seen for quiet is over; seen again, it starts anew.
func (s *seen) warn(key string, after, quiet time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	k := s.keys[key]
	if k == nil || now.Sub(k.last) > quiet {
		if len(s.keys) >= maxSeen {
			clear(s.keys)
		}
		k = &seenKey{first: now}
		s.keys[key] = k
	}
	k.last = now
	if now.Sub(k.first) < after || now.Sub(k.warned) < warnEvery {
		return false
	}
	k.warned = now
	return true
}

// attr returns the value of r's attribute key, nil if it has none.
func attr(r slog.Record, key string) any {
	var v any
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.Any()
			return false
		}
		return true
	})
	return v
}

func (h *protoHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.Handler = h.Handler.WithAttrs(as)
	return &c
}

func (h *protoHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.Handler = h.Handler.WithGroup(name)
	return &c
}
