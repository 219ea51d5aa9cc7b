package actors

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/mcpclient"
	"github.com/mm-agent/mm/tools"
)

// ElicitationScopeKey is the _meta key of the copy of an elicitation's
// session and tool call (seed: elicitation/create).
const ElicitationScopeKey = "mm.elicitationScope"

// ask asks the user ask_user's questions, without holding the turn's slot:
// one elicitation/create form when the client shows forms; otherwise, when
// every question is a choice or a confirm, one permission request per
// question; otherwise no one can be asked.
func (w *toolWorker) ask(ctx context.Context, root *actor.RootContext, parent *actor.PID, qs []tools.Question) tools.Answers {
	var a tools.Answers
	switch {
	case w.client.Forms(w.session):
		if !w.person(ctx, root, parent, func() { a = w.askForm(ctx, qs) }) {
			return tools.Answers{Outcome: "cancel"}
		}
	case tools.Choosable(qs):
		if !w.person(ctx, root, parent, func() { a = w.askChoices(ctx, qs) }) {
			return tools.Answers{Outcome: "cancel"}
		}
	default:
		return tools.Answers{Outcome: "none", Why: "the editor cannot show forms, and not every question is a choice"}
	}
	return a
}

func (w *toolWorker) askForm(ctx context.Context, qs []tools.Question) tools.Answers {
	res, err := w.client.Elicit(ctx, Elicitation{
		SessionID: w.session, ToolCallID: w.callID, Message: tools.FormMessage(qs), Schema: tools.FormSchema(qs),
	})
	switch {
	case ctx.Err() != nil:
		return tools.Answers{Outcome: "cancel"}
	case errors.Is(err, ErrAnswerTooLarge):
		return tools.Answers{Outcome: "invalid", Why: err.Error()}
	case err != nil:
		return tools.Answers{Outcome: "none", Why: "the editor answered with an error: " + err.Error()}
	case res.Action == "accept":
		values, err := tools.FormValues(qs, res.Content)
		if err != nil {
			return tools.Answers{Outcome: "invalid", Why: err.Error()}
		}
		return tools.Answers{Outcome: "accept", Values: values}
	case res.Action == "decline":
		return tools.Answers{Outcome: "decline"}
	}
	return tools.Answers{Outcome: "cancel"}
}

// askChoices asks each question as a permission request whose options are
// the question's choices, and decline.
func (w *toolWorker) askChoices(ctx context.Context, qs []tools.Question) tools.Answers {
	values := make([]any, len(qs))
	for i, q := range qs {
		choices := q.Options
		if q.Type == "confirm" {
			choices = []string{"Yes", "No"}
		}
		opts := make([]acp.PermissionOption, 0, len(choices)+1)
		for j, c := range choices {
			opts = append(opts, acp.PermissionOption{OptionId: acp.PermissionOptionId(strconv.Itoa(j)), Name: c, Kind: acp.PermissionOptionKindAllowOnce})
		}
		opts = append(opts, acp.PermissionOption{OptionId: "decline", Name: "Decline", Kind: acp.PermissionOptionKindRejectOnce})
		resp, err := w.client.RequestPermission(ctx, acp.RequestPermissionRequest{
			SessionId: acp.SessionId(w.session),
			ToolCall: acp.ToolCallUpdate{
				ToolCallId: acp.ToolCallId(w.callID),
				Title:      acp.Ptr("? " + q.Text),
				Kind:       acp.Ptr(acp.ToolKindOther),
				Status:     acp.Ptr(acp.ToolCallStatusPending),
			},
			Options: opts,
		})
		switch {
		case ctx.Err() != nil:
			return tools.Answers{Outcome: "cancel"}
		case err != nil:
			return tools.Answers{Outcome: "none", Why: "the editor answered with an error: " + err.Error()}
		case resp.Outcome.Selected == nil:
			return tools.Answers{Outcome: "cancel"}
		case resp.Outcome.Selected.OptionId == "decline":
			return tools.Answers{Outcome: "decline"}
		}
		id := string(resp.Outcome.Selected.OptionId)
		j, err := strconv.Atoi(id)
		if err != nil || j < 0 || j >= len(choices) {
			if len(id) > 40 {
				id = id[:40] + "…" // the editor's, of any length
			}
			return tools.Answers{Outcome: "invalid", Why: fmt.Sprintf("question %d (%q) got option %q, which was not offered", i+1, q.Text, id)}
		}
		if q.Type == "confirm" {
			values[i] = j == 0
		} else {
			values[i] = choices[j]
		}
	}
	return tools.Answers{Outcome: "accept", Values: values}
}

// askURLs lets the MCP servers of the call ask the user to open a page
// (MCP's URL mode elicitation: a sign-in), when the client shows them
// (CapElicitURL): each goes to the client as elicitation/create in URL
// mode, for this tool call, without holding the turn's slot while the user
// decides. For another client the servers were never told mm can.
func (w *toolWorker) askURLs(ctx context.Context, root *actor.RootContext, parent *actor.PID) context.Context {
	if w.client == nil || !w.client.Caps(w.session).Has(CapElicitURL) {
		return ctx
	}
	return mcpclient.WithAsker(ctx, func(actx context.Context, e mcpclient.URLElicitation) (string, error) {
		var action string
		var err error
		if !w.person(actx, root, parent, func() {
			action, err = w.client.ElicitURL(actx, URLElicitation{SessionID: w.session, ToolCallID: w.callID,
				ElicitationID: e.Server + "/" + e.ID, URL: e.URL, Message: e.Message})
		}) {
			return "cancel", context.Canceled
		}
		return action, err
	})
}
