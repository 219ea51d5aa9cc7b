package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mm-agent/mm/history"
)

//go:embed plan.md
var planDescription string

// planArgs are plan's parameters. prepare reads the entries from the
// call's arguments as sent, to word what is wrong with one (planEntry).
type planArgs struct {
	Action  string          `json:"action" enum:"set,update,clear" jsonschema:"set replaces the plan, update changes one entry's status, clear removes the plan."`
	Entries []planEntryArgs `json:"entries,omitempty" jsonschema:"set: the plan's entries, in order."`
	Index   int             `json:"index,omitempty" min:"1" jsonschema:"update: the entry to change, counting from 1."`
	Status  string          `json:"status,omitempty" enum:"pending,in_progress,completed" jsonschema:"update: its new status."`
}

type planEntryArgs struct {
	Content  string `json:"content" jsonschema:"What the step does."`
	Priority string `json:"priority,omitempty" enum:"high,medium,low" jsonschema:"Default medium."`
	Status   string `json:"status,omitempty" enum:"pending,in_progress,completed" jsonschema:"Default pending."`
}

var planSpec = specFor[planArgs]("plan")

// maxPlanEntries bounds a plan: it is for the user to follow at a glance.
const maxPlanEntries = 50

type planTool struct{}

func (planTool) Name() string            { return "plan" }
func (planTool) Description() string     { return planDescription }
func (planTool) Schema() json.RawMessage { return planSpec.schemaCopy() }
func (planTool) Kind() Kind              { return KindOther }

func (planTool) spec() *spec { return planSpec }

// prepare checks the action against the plan as it stands (Env.Plan) and
// computes the plan it makes; every action changes the plan, so each one
// asks permission when the session is not in yolo mode.
func (planTool) prepare(env Env, c *Call) error {
	c.Mutating = true
	a := argsOf[planArgs](c)
	action := a.Action
	c.Title = "plan: " + action
	var next []history.PlanEntry
	switch action {
	case "set":
		raw, _ := c.Args["entries"].([]any)
		if raw == nil {
			return errors.New(`plan: "set" needs "entries", a list of {"content", "priority"?, "status"?}`)
		}
		if len(raw) > maxPlanEntries {
			return fmt.Errorf("plan: %d entries; a plan holds at most %d", len(raw), maxPlanEntries)
		}
		next = make([]history.PlanEntry, 0, len(raw))
		for i, r := range raw {
			e, err := planEntry(i+1, r)
			if err != nil {
				return err
			}
			next = append(next, e)
		}
		c.Title = fmt.Sprintf("plan: set %d entr%s", len(next), plural(len(next), "y", "ies"))
	case "update":
		i := a.Index
		if i == 0 {
			return errors.New(`plan: "update" needs "index" (the entry, counting from 1) and "status"`)
		}
		if i > len(env.Plan) {
			return fmt.Errorf("plan: there is no entry %d; the plan has %d entr%s", i, len(env.Plan), plural(len(env.Plan), "y", "ies"))
		}
		status := a.Status
		if !validStatus(status) {
			return fmt.Errorf(`plan: "status" must be pending, in_progress or completed, got %q`, status)
		}
		next = append([]history.PlanEntry(nil), env.Plan...)
		next[i-1].Status = status
		c.Title = fmt.Sprintf("plan: %s → %s", next[i-1].Content, status)
	case "clear":
		next = []history.PlanEntry{}
	default:
		return fmt.Errorf(`plan: "action" must be set, update or clear, got %q`, action)
	}
	c.plan = next
	return nil
}

func planEntry(n int, raw any) (history.PlanEntry, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return history.PlanEntry{}, fmt.Errorf("plan: entry %d must be an object {\"content\", \"priority\"?, \"status\"?}, got %s", n, jsonTypeName(raw))
	}
	e := history.PlanEntry{Priority: "medium", Status: "pending"}
	for k, v := range m {
		s, ok := v.(string)
		if !ok && v != nil {
			return history.PlanEntry{}, fmt.Errorf("plan: entry %d: %q must be a string, got %s", n, k, jsonTypeName(v))
		}
		switch k {
		case "content":
			e.Content = strings.TrimSpace(s)
		case "priority":
			if s != "" {
				e.Priority = s
			}
		case "status":
			if s != "" {
				e.Status = s
			}
		default:
			return history.PlanEntry{}, fmt.Errorf("plan: entry %d: unknown key %q; an entry is {\"content\", \"priority\"?, \"status\"?}", n, k)
		}
	}
	switch {
	case e.Content == "":
		return history.PlanEntry{}, fmt.Errorf(`plan: entry %d has no "content"`, n)
	case e.Priority != "high" && e.Priority != "medium" && e.Priority != "low":
		return history.PlanEntry{}, fmt.Errorf(`plan: entry %d: "priority" must be high, medium or low, got %q`, n, e.Priority)
	case !validStatus(e.Status):
		return history.PlanEntry{}, fmt.Errorf(`plan: entry %d: "status" must be pending, in_progress or completed, got %q`, n, e.Status)
	}
	return e, nil
}

func validStatus(s string) bool { return s == "pending" || s == "in_progress" || s == "completed" }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// run returns the plan the call makes, for the session to keep and show.
func (planTool) run(_ context.Context, _ Env, c *Call) Result {
	return Result{Output: RenderPlan(c.plan), Plan: c.plan}
}

// RenderPlan is the plan as the model reads it.
func RenderPlan(p []history.PlanEntry) string {
	if len(p) == 0 {
		return "The plan is empty."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Plan (%d entr%s):\n", len(p), plural(len(p), "y", "ies"))
	for i, e := range p {
		fmt.Fprintf(&b, "%d. [%s] (%s) %s\n", i+1, e.Status, e.Priority, e.Content)
	}
	return b.String()
}
