// Package logs builds mm's logger: plain lines on stderr (never stdout,
// which carries JSON-RPC only), one record a line, the message first so the
// `[acp] …` lines of the ACP surface read as they are specified.
//
// A Logger is safe for concurrent use; each record is one Write.
package logs

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
)

// New returns a logger writing records at or above min to w.
func New(w io.Writer, min slog.Level) *slog.Logger {
	return slog.New(&handler{w: w, min: min, mu: &sync.Mutex{}})
}

type handler struct {
	w     io.Writer
	min   slog.Level
	mu    *sync.Mutex
	attrs []slog.Attr
	group string
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	buf := make([]byte, 0, 128)
	if r.Level >= slog.LevelWarn {
		buf = append(buf, r.Level.String()...)
		buf = append(buf, ": "...)
	}
	buf = append(buf, r.Message...)
	add := func(a slog.Attr) bool {
		if a.Equal(slog.Attr{}) {
			return true
		}
		buf = append(buf, ' ')
		if h.group != "" {
			buf = append(buf, h.group...)
			buf = append(buf, '.')
		}
		buf = append(buf, a.Key...)
		buf = append(buf, '=')
		v := a.Value.Resolve().String()
		if needsQuote(v) {
			buf = strconv.AppendQuote(buf, v)
		} else {
			buf = append(buf, v...)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	buf = append(buf, '\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(buf)
	return err
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, c := range s {
		if c <= ' ' || c == '"' || c == '=' {
			return true
		}
	}
	return false
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
