package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

const fourQuestions = `{"questions":[
 {"question":"Which db?","type":"choice","options":["pg","sqlite"],"default":"pg"},
 {"question":"Which tags?","type":"multi","options":["a","b","c"],"default":["a"]},
 {"question":"Name?","type":"text"},
 {"question":"Go ahead?","type":"confirm","default":true}]}`

func TestAskUserForm(t *testing.T) {
	c, err := Prepare(Env{}, "ask_user", fourQuestions)
	if err != nil {
		t.Fatal(err)
	}
	if c.Title != "ask_user: 4 questions" || c.Mutating || len(c.Questions) != 4 || Choosable(c.Questions) {
		t.Fatalf("call = %+v", c)
	}
	if FormMessage(c.Questions) != "The agent has 4 questions for you." || FormMessage(c.Questions[:1]) != "Which db?" {
		t.Error(FormMessage(c.Questions))
	}
	schema, _ := json.Marshal(FormSchema(c.Questions))
	want := `{"properties":{"q1":{"default":"pg","enum":["pg","sqlite"],"title":"Which db?","type":"string"},` +
		`"q2":{"default":["a"],"items":{"enum":["a","b","c"],"type":"string"},"title":"Which tags?","type":"array"},` +
		`"q3":{"title":"Name?","type":"string"},"q4":{"default":true,"title":"Go ahead?","type":"boolean"}},` +
		`"required":["q1","q2","q3","q4"],"type":"object"}`
	if string(schema) != want {
		t.Errorf("schema\n got %s\nwant %s", schema, want)
	}
	values, err := FormValues(c.Questions, map[string]any{"q1": "sqlite", "q2": []any{"b", "c"}, "q3": "Bob", "q4": false})
	if err != nil {
		t.Fatal(err)
	}
	if got := AnswersText(c.Questions, values); got != `{"Which db?": "sqlite", "Which tags?": ["b","c"], "Name?": "Bob", "Go ahead?": false}` {
		t.Errorf("answers %s", got)
	}
	for outcome, want := range map[string]string{"accept": `{"Which db?": "pg"`, "decline": "declined", "cancel": "cancelled", "none": "no one can be asked",
		"invalid": "the editor's answers do not fit the questions: why"} {
		env := Env{Ask: func(_ context.Context, qs []Question) Answers {
			return Answers{Outcome: outcome, Values: []any{"pg", []string{"a"}, "x", true}, Why: "why"}
		}}
		if res := Run(context.Background(), env, c); !strings.HasPrefix(res.Output, want) {
			t.Errorf("%s: %q", outcome, res.Output)
		}
	}
	if res := Run(context.Background(), Env{}, c); !strings.HasPrefix(res.Output, "no one can be asked") || !res.Failed {
		t.Errorf("no asker: %+v", res)
	}
}

func TestAskUserValidation(t *testing.T) {
	for args, want := range map[string]string{
		`{"questions":[]}`: "empty",
		`{"questions":[{"question":"x","type":"choice"}]}`:                                    `give its "options"`,
		`{"questions":[{"question":"x","type":"pick"}]}`:                                      "must be choice, multi, text or confirm",
		`{"questions":[{"question":"","type":"text"}]}`:                                       `no "question"`,
		`{"questions":[{"question":"x","type":"confirm","default":"yes"}]}`:                   "true or false",
		`{"questions":[{"question":"x","type":"choice","options":["a"],"default":"b"}]}`:      "one of its options",
		`{"questions":[{"question":"x","type":"multi","options":["a"],"default":["a","z"]}]}`: "list of its options",
		`{"questions":[{"question":"x","type":"text","hint":"h"}]}`:                           `unknown key "hint"`,
		`{"questions":["x"]}`: "must be an object",
		`{"questions":[{"question":"x","type":"text"},{"question":"y","type":"text"},{"question":" x","type":"confirm"}]}`: `question 3 repeats question 1 ("x")`,
	} {
		if _, err := Prepare(Env{}, "ask_user", args); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

// TestFormValuesRefuseWhatDoesNotFit: every answer must have its
// question's type; the first that does not is named.
func TestFormValuesRefuseWhatDoesNotFit(t *testing.T) {
	c, err := Prepare(Env{}, "ask_user", fourQuestions)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		content map[string]any
		want    string
	}{
		{map[string]any{"q1": "pg", "q2": true, "q3": "x", "q4": true}, `question 2 ("Which tags?") is a multi, and its answer is true, not a list of its options, each at most once`},
		{map[string]any{"q1": "pg", "q2": []any{"a", 1}, "q3": "x", "q4": true}, `question 2 ("Which tags?") is a multi, and its answer is ["a",1], not a list of its options, each at most once`},
		{map[string]any{"q1": []any{"pg"}, "q2": []any{}, "q3": "x", "q4": true}, `question 1 ("Which db?") is a choice, and its answer is ["pg"], not one of its options`},
		{map[string]any{"q1": "pg", "q2": []any{}, "q3": "x", "q4": "true"}, `question 4 ("Go ahead?") is a confirm, and its answer is "true", not true or false`},
		{map[string]any{"q1": "pg", "q2": []any{}, "q3": strings.Repeat("long ", 1000), "q4": 1}, `question 4 ("Go ahead?") is a confirm, and its answer is 1, not true or false`},
		{map[string]any{"q1": "pg", "q2": []any{}, "q3": nil, "q4": true}, `question 3 ("Name?") has no answer`},
		{map[string]any{"q1": "pg", "q2": []any{"a", "a"}, "q3": "x", "q4": true}, `question 2 ("Which tags?") is a multi, and its answer is ["a","a"], not a list of its options, each at most once`},
		{map[string]any{"q1": "pg", "q2": []any{"a", "b", "c", "a"}, "q3": "x", "q4": true}, `question 2 ("Which tags?") is a multi, and its answer is ["a","b","c","a"], not a list of its options, each at most once`},
		{map[string]any{"q1": "pg", "q2": []any{}, "q3": strings.Repeat("x", MaxOutputBytes+4096), "q4": true}, `question 3 ("Name?") got an answer of 260.0 KiB, more than the 256.0 KiB a tool's output may hold`},
	} {
		if _, err := FormValues(c.Questions, tc.content); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %s", tc.content, err, tc.want)
		}
	}
	if v, err := FormValues(c.Questions, map[string]any{"q1": "pg", "q2": []any{}, "q3": "", "q4": true, "q9": "extra"}); err != nil || len(v[1].([]string)) != 0 {
		t.Errorf("an empty multi and an empty text are answers: %v %v", v, err)
	}
}

// TestFormValuesBoundTheAnswers: text answers that fit one by one but not
// together are refused too, naming where they went over.
func TestFormValuesBoundTheAnswers(t *testing.T) {
	c, err := Prepare(Env{}, "ask_user", `{"questions":[{"question":"a?","type":"text"},{"question":"b?","type":"text"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	half := strings.Repeat("x", MaxOutputBytes/2+2048)
	_, err = FormValues(c.Questions, map[string]any{"q1": half, "q2": half})
	if want := `the answers up to question 2 ("b?") take 260.0 KiB, more than the 256.0 KiB a tool's output may hold`; err == nil || err.Error() != want {
		t.Errorf("%v, want %s", err, want)
	}
}
