package tools

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/mm-agent/mm/history"
)

func TestPlanTool(t *testing.T) {
	env := Env{Cwd: t.TempDir()}
	run := func(args string) (Result, error) {
		c, err := Prepare(env, "plan", args)
		if err != nil {
			return Result{}, err
		}
		if !c.Mutating {
			t.Errorf("%s: a plan call changes the plan; it must ask when not in yolo", args)
		}
		return Run(context.Background(), env, c), nil
	}
	res, err := run(`{"action":"set","entries":[{"content":"parse"},{"content":"test","priority":"high","status":"in_progress"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	want := []history.PlanEntry{{Content: "parse", Priority: "medium", Status: "pending"}, {Content: "test", Priority: "high", Status: "in_progress"}}
	if !reflect.DeepEqual(res.Plan, want) || !strings.Contains(res.Output, "2. [in_progress] (high) test") {
		t.Fatalf("set: %+v %q", res.Plan, res.Output)
	}
	env.Plan = res.Plan
	if res, err = run(`{"action":"update","index":1,"status":"completed"}`); err != nil || res.Plan[0].Status != "completed" || env.Plan[0].Status != "pending" {
		t.Fatalf("update: %+v %v (the old plan must not change)", res.Plan, err)
	}
	if res, err = run(`{"action":"clear"}`); err != nil || res.Plan == nil || len(res.Plan) != 0 {
		t.Fatalf("clear: %#v %v", res.Plan, err)
	}
	for args, want := range map[string]string{
		`{"action":"redo"}`: "must be set, update or clear",
		`{"action":"set"}`:  `needs "entries"`,
		`{"action":"set","entries":[{"content":"x","priority":"urgent"}]}`: "priority",
		`{"action":"set","entries":[{"content":""}]}`:                      `no "content"`,
		`{"action":"set","entries":[{"content":"x","owner":"me"}]}`:        `unknown key "owner"`,
		`{"action":"set","entries":["x"]}`:                                 "must be an object",
		`{"action":"update","index":3,"status":"completed"}`:               "no entry 3",
		`{"action":"update","index":1,"status":"done"}`:                    "must be pending, in_progress or completed",
		`{"action":"update","status":"completed"}`:                         `needs "index"`,
	} {
		if _, err := run(args); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", args, err, want)
		}
	}
}
