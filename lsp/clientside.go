package lsp

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"go.lsp.dev/jsonrpc2"
	"go.lsp.dev/protocol"
	"go.lsp.dev/uri"
)

// maxUnread bounds the answers to a server's requests that wait for it to
// read them. A server reads them as it reads anything of mm's, through a
// pipe that holds about a thousand; one that let the pipe fill and asked
// this many more questions is asking without reading.
const maxUnread = 64

// maxParams bounds the params of what the server sends that mm decodes
// (its requests, its log and messages): decoded, a list of small items
// takes several times its text, and honest params are a few KiB.
const maxParams = 1 << 20

// maxItems bounds the sections of one workspace/configuration request.
const maxItems = 1024

// handler handles what the server sends of its own, on the connection's
// goroutine, one message at a time, each in constant time and memory:
// jsonrpc2's handler that serves each message in a goroutine of its own
// (protocol.Handlers) would let a server that sends faster than they end
// pile them up without bound.
//
// Notifications mm has no use for are dropped unread; the others are
// logged, within the budget of clientSide.logs. Requests are answered at
// once, by protocol's ClientHandler dispatching to clientSide, and the
// answer, a jsonrpc2.Response that holds nothing of the request, is queued
// for the answerer (server.run), which writes it while the connection reads
// on: a server that asks without reading the answers fills the queue and is
// stopped. workspace/applyEdit is answered before the dispatch,
// because the library's ApplyEdit replies with a bare boolean where the
// protocol wants an ApplyWorkspaceEditResult; requests it does not know
// fall to the last handler.
func (srv *server) handler() jsonrpc2.Handler {
	last := func(ctx context.Context, reply jsonrpc2.Replier, req jsonrpc2.Request) error {
		if _, ok := req.(*jsonrpc2.Call); ok {
			srv.log.Debug("lsp: request from the server", "method", clip(req.Method(), 100))
		}
		// The refresh requests (semantic tokens, inlay hints, diagnostics,
		// code lenses) only ask the editor to ask again; there is nothing to
		// refresh here, and an error would be logged as a failure.
		if strings.HasSuffix(req.Method(), "/refresh") {
			return reply(ctx, nil, nil)
		}
		return jsonrpc2.MethodNotFoundHandler(ctx, reply, req)
	}
	cs := &clientSide{srv: srv}
	dispatch := protocol.ClientHandler(cs, last)
	// The handler returns nil whatever happens: jsonrpc2's connection goes
	// on reading after a handler's error, and panics at the next error of
	// another type (conn.fail stores both in one atomic.Value). A server
	// that misbehaved is stopped, which ends the reading.
	return func(ctx context.Context, reply jsonrpc2.Replier, req jsonrpc2.Request) error {
		defer func() {
			if p := recover(); p != nil {
				srv.misbehave(fmt.Sprintf("a %s that made its handler panic: %v", clip(req.Method(), 100), p))
			}
		}()
		call, isCall := req.(*jsonrpc2.Call)
		if !isCall {
			switch req.Method() {
			case protocol.MethodTextDocumentPublishDiagnostics, protocol.MethodProgress, protocol.MethodTelemetryEvent:
				return nil
			case protocol.MethodWindowLogMessage, protocol.MethodWindowShowMessage:
				// Past the log's budget, they are not worth decoding.
				if cs.logs.spent(time.Now()) {
					return nil
				}
			}
			if len(req.Params()) > maxParams {
				srv.log.Debug("lsp: a notification too large to read, dropped", "method", clip(req.Method(), 100), "bytes", len(req.Params()))
				return nil
			}
			// A notification's reply is jsonrpc2's, which writes nothing and
			// returns nil.
			_ = dispatch(ctx, reply, req)
			return nil
		}
		id := call.ID()
		queue := func(_ context.Context, result any, err error) error {
			resp, merr := jsonrpc2.NewResponse(id, result, err)
			if merr != nil {
				resp, _ = jsonrpc2.NewResponse(id, nil, merr)
			}
			select {
			case srv.answers <- resp:
				return nil
			default:
				srv.misbehave(fmt.Sprintf("%d answers to its requests unread", maxUnread))
				return nil
			}
		}
		if req.Method() == protocol.MethodWorkspaceApplyEdit {
			return queue(ctx, map[string]any{
				"applied":       false,
				"failureReason": "mm applies edits itself",
			}, nil)
		}
		if len(req.Params()) > maxParams {
			return queue(ctx, nil, fmt.Errorf("%w: mm reads at most %d KiB of params", jsonrpc2.ErrInvalidParams, maxParams>>10))
		}
		_ = dispatch(ctx, queue, req) // its error is queue's, always nil
		return nil
	}
}

// clientSide is the client a server talks to: it logs what the server says
// and answers its questions with the defaults. Only the connection's
// goroutine calls it.
type clientSide struct {
	srv  *server
	logs logBudget
}

var _ protocol.Client = (*clientSide)(nil)

// log logs what the server said, within the budget, its text shortened.
func (cs *clientSide) log(msg string, typ protocol.MessageType, text string) {
	if dropped, ok := cs.logs.take(time.Now()); ok {
		if dropped > 0 {
			cs.srv.log.Debug("lsp: messages of the server left out of the log", "count", dropped)
		}
		cs.srv.log.Debug(msg, "type", typ.String(), "message", clip(text, 300))
	}
}

// logBudget bounds the lines the server's messages take in mm's log to
// logsPerSecond; the rest are counted, and the count logged with the next
// line.
type logBudget struct {
	window  time.Time
	n       int
	dropped int
}

const logsPerSecond = 20

// take says whether a line may be logged now, and how many were dropped
// before it.
func (b *logBudget) take(now time.Time) (dropped int, ok bool) {
	if b.spent(now) {
		return 0, false
	}
	b.n++
	dropped, b.dropped = b.dropped, 0
	return dropped, true
}

// spent says whether this second's lines are all taken, and counts the
// line that asks as dropped if they are.
func (b *logBudget) spent(now time.Time) bool {
	if now.Sub(b.window) >= time.Second {
		b.window, b.n = now, 0
	}
	if b.n >= logsPerSecond {
		b.dropped++
		return true
	}
	return false
}

func (cs *clientSide) Progress(context.Context, *protocol.ProgressParams) error { return nil }

func (cs *clientSide) WorkDoneProgressCreate(context.Context, *protocol.WorkDoneProgressCreateParams) error {
	return nil
}

func (cs *clientSide) LogMessage(_ context.Context, p *protocol.LogMessageParams) error {
	cs.log("lsp: server log", p.Type, p.Message)
	return nil
}

func (cs *clientSide) PublishDiagnostics(context.Context, *protocol.PublishDiagnosticsParams) error {
	return nil
}

func (cs *clientSide) ShowMessage(_ context.Context, p *protocol.ShowMessageParams) error {
	cs.log("lsp: server message", p.Type, p.Message)
	return nil
}

func (cs *clientSide) ShowMessageRequest(_ context.Context, p *protocol.ShowMessageRequestParams) (*protocol.MessageActionItem, error) {
	cs.log("lsp: server question, left unanswered", p.Type, p.Message)
	return nil, nil
}

func (cs *clientSide) Telemetry(context.Context, any) error { return nil }

func (cs *clientSide) RegisterCapability(context.Context, *protocol.RegistrationParams) error {
	return nil
}

func (cs *clientSide) UnregisterCapability(context.Context, *protocol.UnregistrationParams) error {
	return nil
}

func (cs *clientSide) ApplyEdit(context.Context, *protocol.ApplyWorkspaceEditParams) (bool, error) {
	return false, nil
}

// Configuration answers null for every item, which servers read as "use
// your defaults"; mm has no per-server settings to give.
func (cs *clientSide) Configuration(_ context.Context, p *protocol.ConfigurationParams) ([]any, error) {
	if len(p.Items) > maxItems {
		return nil, fmt.Errorf("%w: mm answers at most %d items", jsonrpc2.ErrInvalidParams, maxItems)
	}
	return make([]any, len(p.Items)), nil
}

func (cs *clientSide) WorkspaceFolders(context.Context) ([]protocol.WorkspaceFolder, error) {
	root := cs.srv.root
	return []protocol.WorkspaceFolder{{URI: string(uri.File(root)), Name: filepath.Base(root)}}, nil
}
