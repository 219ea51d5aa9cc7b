package jsonrpc

import (
	"context"
	"encoding/json"
)

// What the client side of a connection needs beside the Conn (mm asking
// another agent, the test kit that drives mm as an editor does): calls
// whose results are read into acp-go-sdk's types, and the requests of the
// peer's in flight looked up, for a cancel, where they are kept.

// CallFor calls method with params (Conn.Call) and reads its result into
// an R, as acp-go-sdk's client reads it: an empty result leaves R's zero
// value; a result that cannot be read is an ErrInternal error saying why.
// An R that validates itself (acp-go-sdk's types have Validate methods)
// is validated, and one that fails is an ErrInternal error too.
func CallFor[R any](ctx context.Context, c *Conn, method string, params any, session string) (R, error) {
	var r R
	raw, err := c.Call(ctx, method, params, session)
	if err != nil {
		return r, err
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r); err != nil {
			return r, ErrInternal.With(err.Error())
		}
	}
	if v, ok := any(&r).(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return r, ErrInternal.With(method + ": " + err.Error())
		}
	}
	return r, nil
}

// Notes are the notes (Annotate) of the peer's requests in flight that
// keep keeps: what a proxy needs when a whole part of what it handed on
// is lost.
func (c *Conn) Notes(keep func(note any) bool) []any {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []any
	for _, in := range c.incoming {
		if in.Note != nil && keep(in.Note) {
			out = append(out, in.Note)
		}
	}
	return out
}

// Lookup is what the Conn keeps of the peer's request id while it is in
// flight (its Tag among the rest), left in place: a cancel of the peer's
// ($/cancel_request, served by Preempt) finds there what it cancels.
func (c *Conn) Lookup(id ID) (Incoming, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.incoming[id]
	return in, ok
}
