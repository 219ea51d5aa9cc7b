package llm

import (
	"context"
	"time"
)

// scriptedModel plays a Script with no server.
type scriptedModel struct {
	script *Script
	// idle is Config.IdleTimeout: a script that goes quiet (a stall, a
	// long sleep, a slow token rate) ends as a quiet server's call does.
	idle time.Duration
}

func newScripted(c Config) (Model, error) {
	if c.Script == "" {
		return &scriptedModel{script: DefaultScript(), idle: c.IdleTimeout}, nil
	}
	s, err := LoadScript(c.Script)
	if err != nil {
		return nil, err
	}
	return &scriptedModel{script: s, idle: c.IdleTimeout}, nil
}

// scriptedWhere names the scripted model in timeout errors.
const scriptedWhere = "scripted model"

func (m *scriptedModel) Stream(ctx context.Context, req Request, emit func(Delta)) (Response, error) {
	st := m.script.Answer(req.Messages)
	// The call's idle timer is the HTTP providers' (transport.go): every
	// delta restarts it, and when it fires it ends this call's context
	// only, so that the call reports the timeout and not a cancel. The
	// time the caller takes with a delta (a slow editor) is not counted.
	// Without a timeout (the stress harness) there is no timer to keep.
	var c *call
	if m.idle > 0 {
		ctx, c = beginCall(ctx, Config{IdleTimeout: m.idle}, false)
		defer c.end()
		emit = c.consumer(emit)
	}
	heard := func(d Delta) {
		if c != nil {
			c.activity()
		}
		emit(d)
	}
	ended := func() error {
		if c != nil {
			return c.result(nil, scriptedWhere)
		}
		return endedError(ctx, scriptedWhere)
	}
	if Pause(ctx, st.Sleep+st.Latency) != nil {
		return Response{}, ended()
	}
	switch {
	case st.Error != "":
		return Response{}, serverErr("%s", st.Error)
	case st.Garbage:
		return Response{}, serverErr("malformed stream (scripted garbage step)")
	case st.Stall:
		if word, _ := NextWord(st.Text); word != "" {
			heard(Delta{Kind: DeltaText, Text: word})
		}
		<-ctx.Done()
		return Response{}, ended()
	}
	gap := st.WordGap()
	if streamWords(ctx, DeltaReasoning, st.Reasoning, gap, heard) != nil ||
		streamWords(ctx, DeltaText, st.Text, gap, heard) != nil {
		return Response{}, ended()
	}
	if st.Truncate {
		return Response{}, earlyEndError()
	}
	return Response{
		Text:         st.Text,
		Reasoning:    st.Reasoning,
		ToolCalls:    st.ToolCalls,
		Usage:        st.Usage,
		FinishReason: st.Finish,
	}, nil
}

// WordGap is the time between two streamed words at the step's token rate.
func (s *Step) WordGap() time.Duration {
	if s.TokensPerSec <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / s.TokensPerSec)
}

// streamWords emits text word by word, gap apart.
func streamWords(ctx context.Context, kind DeltaKind, text string, gap time.Duration, emit func(Delta)) error {
	if gap == 0 {
		// No token rate: the whole text is ready at once, as a server's
		// buffered chunk would be. Word by word it would only measure the
		// cost of messages no real model sends that fast.
		if text != "" {
			emit(Delta{Kind: kind, Text: text})
		}
		return nil
	}
	for text != "" {
		if err := Pause(ctx, gap); err != nil {
			return err
		}
		var word string
		word, text = NextWord(text)
		emit(Delta{Kind: kind, Text: word})
	}
	return nil
}

// Pause waits d unless ctx ends first, and returns ctx's error if it has.
// The scripted model and its HTTP fixture pace their answers with it.
func Pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
