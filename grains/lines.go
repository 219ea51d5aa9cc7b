package grains

import (
	"bytes"
	"encoding/json"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/jsonrpc"
)

// The way back: what a connection's sessions write on the nodes that run
// them comes to its edge actor as Lines, and goes to the client in order,
// once each.

// queued is a Lines for the writer, and whom to tell once it is written:
// the sender of its latest copy (a virtual connection sends it again while
// it waits).
type queued struct {
	m  *grainspb.Lines
	to *actor.PID
}

// receive takes the lines the connection's sessions send from their
// nodes and queues them for the writer, once each; a Lines already written
// is answered at once. The actor never waits on the client.
func (c *edgeConn) receive(ctx actor.Context) {
	m, ok := ctx.Message().(*grainspb.Lines)
	if !ok {
		return
	}
	key := connKey(m.From)
	c.mu.Lock()
	q := c.waiting[key]
	switch {
	case m.Seq <= c.written[key]:
		c.mu.Unlock()
		ctx.Respond(&grainspb.Written{Seq: m.Seq})
		return
	case q != nil && q.m.Seq == m.Seq:
		q.to = ctx.Sender()
	default:
		q = &queued{m: m, to: ctx.Sender()}
		c.waiting[key] = q
		c.queue = append(c.queue, q)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writer writes the queued Lines to the client, in order, and answers
// each once it is written: the client's pace is its sessions' pace,
// wherever they run.
func (c *edgeConn) writer() {
	root := c.e.m.System().Root
	for {
		select {
		case <-c.wake:
		case <-c.stop:
			return
		}
		for {
			c.mu.Lock()
			if len(c.queue) == 0 {
				c.mu.Unlock()
				break
			}
			q := c.queue[0]
			c.queue[0] = nil
			c.queue = c.queue[1:]
			c.mu.Unlock()
			// A node this one counts out may not know it yet and go on:
			// its sessions were taken over elsewhere, and what it writes
			// now is a stale copy's. It is answered, so that the stale
			// copy ends its turn and fails its save, and dropped.
			if c.e.m.isMember(q.m.Node) {
				c.write(q.m)
			}
			key := connKey(q.m.From)
			c.mu.Lock()
			c.written[key] = max(c.written[key], q.m.Seq)
			if c.waiting[key] == q {
				delete(c.waiting, key)
			}
			to := q.to
			c.mu.Unlock()
			root.Send(to, &grainspb.Written{Seq: q.m.Seq})
		}
	}
}

// write writes a Lines to the client: mm's requests are remembered (the
// client's answers go back to the node that asked), responses free their
// requests' places, and the late answers of failed requests are dropped.
func (c *edgeConn) write(m *grainspb.Lines) {
	from := actor.NewPID(m.From.GetAddress(), m.From.GetId())
	key := connKey(m.From)
	data := m.Data
	n := 0
	c.mu.Lock()
	c.written[key] = m.Seq
	c.virtuals[key] = from
	var kept []byte // data without the dropped lines, once one is
	dropped := false
	for start := 0; start < len(data); {
		end := len(data)
		if i := bytes.IndexByte(data[start:], '\n'); i >= 0 {
			end = start + i + 1
		}
		line := data[start:end]
		start = end
		id := gjson.GetBytes(line, "id")
		key := jsonrpc.IDKey(json.RawMessage(id.Raw))
		switch {
		case !id.Exists():
		case gjson.GetBytes(line, "method").Exists():
			c.calls[key] = from
		case c.failed[key]:
			delete(c.failed, key)
			if !dropped {
				kept = append(kept, data[:end-len(line)]...)
			}
			dropped = true
			continue
		default:
			if _, ok := c.inflight[key]; ok {
				delete(c.inflight, key)
				n++
			}
		}
		if dropped {
			kept = append(kept, line...)
		}
	}
	c.mu.Unlock()
	if dropped {
		data = kept
	}
	if len(data) > 0 {
		_, _ = c.out.Write(data)
	}
	if n > 0 {
		c.answered(n)
	}
}
