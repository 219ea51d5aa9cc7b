package lsp

import (
	"context"
	"path/filepath"
	"strings"

	"go.lsp.dev/jsonrpc2"
	"go.lsp.dev/protocol"
	"go.lsp.dev/uri"
)

// handler answers what the server asks of the client. protocol's
// ClientHandler dispatches to clientSide; workspace/applyEdit is answered
// before it, because the library's ApplyEdit replies with a bare boolean
// where the protocol wants an ApplyWorkspaceEditResult; requests it does
// not know fall to the last handler.
func (srv *server) handler() jsonrpc2.Handler {
	last := func(ctx context.Context, reply jsonrpc2.Replier, req jsonrpc2.Request) error {
		if _, ok := req.(*jsonrpc2.Call); ok {
			srv.log.Debug("lsp: request from the server", "method", req.Method())
		}
		// The refresh requests (semantic tokens, inlay hints, diagnostics,
		// code lenses) only ask the editor to ask again; there is nothing to
		// refresh here, and an error would be logged as a failure.
		if strings.HasSuffix(req.Method(), "/refresh") {
			return reply(ctx, nil, nil)
		}
		return jsonrpc2.MethodNotFoundHandler(ctx, reply, req)
	}
	dispatch := protocol.ClientHandler(&clientSide{srv: srv}, last)
	return protocol.Handlers(func(ctx context.Context, reply jsonrpc2.Replier, req jsonrpc2.Request) error {
		if req.Method() == protocol.MethodWorkspaceApplyEdit {
			return reply(ctx, map[string]any{
				"applied":       false,
				"failureReason": "mm applies edits itself",
			}, nil)
		}
		return dispatch(ctx, reply, req)
	})
}

// clientSide is the client a server talks to: it logs what the server says
// and answers its questions with the defaults.
type clientSide struct {
	srv *server
}

var _ protocol.Client = (*clientSide)(nil)

func (cs *clientSide) Progress(context.Context, *protocol.ProgressParams) error { return nil }

func (cs *clientSide) WorkDoneProgressCreate(context.Context, *protocol.WorkDoneProgressCreateParams) error {
	return nil
}

func (cs *clientSide) LogMessage(_ context.Context, p *protocol.LogMessageParams) error {
	cs.srv.log.Debug("lsp: server log", "type", p.Type.String(), "message", p.Message)
	return nil
}

func (cs *clientSide) PublishDiagnostics(context.Context, *protocol.PublishDiagnosticsParams) error {
	return nil
}

func (cs *clientSide) ShowMessage(_ context.Context, p *protocol.ShowMessageParams) error {
	cs.srv.log.Debug("lsp: server message", "type", p.Type.String(), "message", p.Message)
	return nil
}

func (cs *clientSide) ShowMessageRequest(_ context.Context, p *protocol.ShowMessageRequestParams) (*protocol.MessageActionItem, error) {
	cs.srv.log.Debug("lsp: server question, left unanswered", "type", p.Type.String(), "message", p.Message)
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
	return make([]any, len(p.Items)), nil
}

func (cs *clientSide) WorkspaceFolders(context.Context) ([]protocol.WorkspaceFolder, error) {
	root := cs.srv.root
	return []protocol.WorkspaceFolder{{URI: string(uri.File(root)), Name: filepath.Base(root)}}, nil
}
