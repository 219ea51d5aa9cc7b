package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mm-agent/mm/history"
)

//go:embed ask_user.md
var askUserDescription string

// askUserArgs are ask_user's parameters. prepare reads the questions from
// the call's arguments as sent, to word what is wrong with one (question).
type askUserArgs struct {
	Questions []questionArgs `json:"questions" minItems:"1" jsonschema:"The questions, asked together."`
}

type questionArgs struct {
	Question string   `json:"question" jsonschema:"The question, as the user reads it."`
	Type     string   `json:"type" enum:"choice,multi,text,confirm" jsonschema:"choice: one of the options; multi: any of them; text: free text; confirm: yes or no."`
	Options  []string `json:"options,omitempty" jsonschema:"choice and multi: the options."`
	Default  any      `json:"default,omitempty" jsonschema:"An option, a list of options (multi), a text, or true/false (confirm)."`
}

var askUserSpec = specFor[askUserArgs]("ask_user")

// maxQuestions bounds one form: a person answers it.
const maxQuestions = 10

// Question is one question of an ask_user call, validated.
type Question struct {
	Text    string
	Type    string // choice, multi, text or confirm
	Options []string
	// Default is nil, a string (choice, text), a []string (multi) or a
	// bool (confirm).
	Default any
}

// Answers is how a person answered a form.
type Answers struct {
	// Outcome is "accept", "decline", "cancel", "none" (no one can be
	// asked), or "invalid" (the editor's answers do not fit the
	// questions).
	Outcome string
	// Values are the accepted answers by question index: a string, a
	// []string or a bool.
	Values []any
	// Why says why no one could be asked, or what does not fit.
	Why string
}

// Asker asks a person a form and waits for the answers; the session
// provides it (elicitation/create, or a permission request per question).
type Asker func(ctx context.Context, qs []Question) Answers

type askUserTool struct{}

func (askUserTool) Name() string            { return "ask_user" }
func (askUserTool) Description() string     { return askUserDescription }
func (askUserTool) Schema() json.RawMessage { return askUserSpec.schemaCopy() }
func (askUserTool) Kind() Kind              { return KindOther }

func (askUserTool) spec() *spec { return askUserSpec }

func (askUserTool) prepare(_ Env, c *Call) error {
	c.Title = "ask_user"
	raw, _ := c.Args["questions"].([]any)
	if len(raw) == 0 {
		return errors.New(`ask_user: "questions" is empty; give at least one {"question", "type"}`)
	}
	if len(raw) > maxQuestions {
		return fmt.Errorf("ask_user: %d questions; ask at most %d at once", len(raw), maxQuestions)
	}
	qs := make([]Question, 0, len(raw))
	asked := make(map[string]int, len(raw))
	for i, r := range raw {
		q, err := question(i+1, r)
		if err != nil {
			return err
		}
		// The answers are keyed by question text (AnswersText): a
		// repeated text would give two answers one key, and the person
		// could not tell the two apart either.
		if first, ok := asked[q.Text]; ok {
			return fmt.Errorf("ask_user: question %d repeats question %d (%q); ask each question once", i+1, first, q.Text)
		}
		asked[q.Text] = i + 1
		qs = append(qs, q)
	}
	c.Questions = qs
	if len(qs) == 1 {
		c.Title = "ask_user: " + qs[0].Text
	} else {
		c.Title = fmt.Sprintf("ask_user: %d questions", len(qs))
	}
	return nil
}

func question(n int, raw any) (Question, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return Question{}, fmt.Errorf(`ask_user: question %d must be an object {"question", "type", "options"?, "default"?}, got %s`, n, jsonTypeName(raw))
	}
	for k := range m {
		switch k {
		case "question", "type", "options", "default":
		default:
			return Question{}, fmt.Errorf(`ask_user: question %d: unknown key %q; a question is {"question", "type", "options"?, "default"?}`, n, k)
		}
	}
	q := Question{}
	q.Text, _ = m["question"].(string)
	q.Text = strings.TrimSpace(q.Text)
	q.Type, _ = m["type"].(string)
	if q.Text == "" {
		return Question{}, fmt.Errorf(`ask_user: question %d has no "question" text`, n)
	}
	switch q.Type {
	case "choice", "multi", "text", "confirm":
	default:
		return Question{}, fmt.Errorf(`ask_user: question %d: "type" must be choice, multi, text or confirm, got %s`, n, short(m["type"]))
	}
	if opts, present := m["options"]; present && opts != nil {
		list, ok := opts.([]any)
		if !ok {
			return Question{}, fmt.Errorf(`ask_user: question %d: "options" must be a list of strings`, n)
		}
		for _, o := range list {
			s, ok := o.(string)
			if !ok || strings.TrimSpace(s) == "" {
				return Question{}, fmt.Errorf(`ask_user: question %d: "options" must be a list of non-empty strings`, n)
			}
			q.Options = append(q.Options, s)
		}
	}
	if (q.Type == "choice" || q.Type == "multi") && len(q.Options) == 0 {
		return Question{}, fmt.Errorf(`ask_user: question %d is a %s: give its "options"`, n, q.Type)
	}
	if d, present := m["default"]; present && d != nil {
		def, err := defaultOf(q, d)
		if err != nil {
			return Question{}, fmt.Errorf("ask_user: question %d: %v", n, err)
		}
		q.Default = def
	}
	return q, nil
}

// defaultOf checks a question's default against its type.
func defaultOf(q Question, d any) (any, error) {
	switch q.Type {
	case "confirm":
		if b, ok := d.(bool); ok {
			return b, nil
		}
		return nil, errors.New(`the "default" of a confirm is true or false`)
	case "text":
		if s, ok := d.(string); ok {
			return s, nil
		}
		return nil, errors.New(`the "default" of a text is a string`)
	case "choice":
		if s, ok := d.(string); ok && slices.Contains(q.Options, s) {
			return s, nil
		}
		return nil, errors.New(`the "default" of a choice is one of its options`)
	}
	var list []any
	switch v := d.(type) {
	case string:
		list = []any{v}
	case []any:
		list = v
	}
	out := []string{}
	for _, o := range list {
		s, ok := o.(string)
		if !ok || !slices.Contains(q.Options, s) {
			return nil, errors.New(`the "default" of a multi is a list of its options`)
		}
		out = append(out, s)
	}
	if len(list) == 0 {
		return nil, errors.New(`the "default" of a multi is a list of its options`)
	}
	return out, nil
}

// run asks through env.Ask and gives the model the answers.
func (askUserTool) run(ctx context.Context, env Env, c *Call) Result {
	if env.Ask == nil {
		return Result{Output: "no one can be asked: this session has no one to ask", Failed: true}
	}
	a := env.Ask(ctx, c.Questions)
	switch a.Outcome {
	case "accept":
		return Result{Output: AnswersText(c.Questions, a.Values)}
	case "decline":
		return Result{Output: "declined: the user chose not to answer"}
	case "cancel":
		return Result{Output: "cancelled: the questions were dismissed", Failed: true}
	case "invalid":
		return Result{Output: "the editor's answers do not fit the questions: " + a.Why, Failed: true}
	}
	why := a.Why
	if why == "" {
		why = "the editor cannot show these questions"
	}
	return Result{Output: "no one can be asked: " + why, Failed: true}
}

// AnswersText renders accepted answers as JSON keyed by question text,
// which prepare keeps unique.
func AnswersText(qs []Question, values []any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, q := range qs {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(q.Text)
		var v any
		if i < len(values) {
			v = values[i]
		}
		val, _ := json.Marshal(v)
		b.Write(k)
		b.WriteString(": ")
		b.Write(val)
	}
	b.WriteByte('}')
	return b.String()
}

// FormMessage is the message of the form that asks qs.
func FormMessage(qs []Question) string {
	if len(qs) == 1 {
		return qs[0].Text
	}
	return fmt.Sprintf("The agent has %d questions for you.", len(qs))
}

// FormSchema is the requested schema of the form that asks qs: one
// property per question, q1, q2, …, all required.
func FormSchema(qs []Question) map[string]any {
	props := map[string]any{}
	required := make([]string, 0, len(qs))
	for i, q := range qs {
		p := map[string]any{"title": q.Text}
		switch q.Type {
		case "choice":
			p["type"], p["enum"] = "string", q.Options
		case "multi":
			p["type"], p["items"] = "array", map[string]any{"type": "string", "enum": q.Options}
		case "text":
			p["type"] = "string"
		case "confirm":
			p["type"] = "boolean"
		}
		if q.Default != nil {
			p["default"] = q.Default
		}
		name := fmt.Sprintf("q%d", i+1)
		props[name] = p
		required = append(required, name)
	}
	return map[string]any{"type": "object", "properties": props, "required": required}
}

// FormValues reads a form's accepted content (by property name) into
// answers by question index. An answer that does not fit its question —
// missing, of another type, an option that was not offered or picked
// twice — is an error that names the question: the editor broke the
// form's schema, and the model must not read a guess. So are answers that
// together are longer than a tool's output may be (MaxOutputBytes): they
// would be cut in the middle of the JSON the model reads.
func FormValues(qs []Question, content map[string]any) ([]any, error) {
	out := make([]any, len(qs))
	size := 0
	for i, q := range qs {
		v, ok := content[fmt.Sprintf("q%d", i+1)]
		if !ok || v == nil {
			return nil, fmt.Errorf("question %d (%q) has no answer", i+1, q.Text)
		}
		var want string
		n := 0
		switch q.Type {
		case "text":
			var s string
			s, ok = v.(string)
			out[i], n = s, len(s)
			want = "a string"
		case "choice":
			s, isString := v.(string)
			out[i], ok = s, isString && slices.Contains(q.Options, s)
			want = "one of its options"
		case "confirm":
			out[i], ok = v.(bool)
			want = "true or false"
		case "multi":
			var picks []string
			picks, ok = picked(q.Options, v)
			out[i] = picks
			want = "a list of its options, each at most once"
		}
		if !ok {
			if list, isList := v.([]any); isList && len(list) > 20 {
				v = list[:20] // short shows 80 bytes: encode no more
			}
			return nil, fmt.Errorf("question %d (%q) is a %s, and its answer is %s, not %s", i+1, q.Text, q.Type, short(v), want)
		}
		if size += n; n > MaxOutputBytes {
			return nil, fmt.Errorf("question %d (%q) got an answer of %s, more than the %s a tool's output may hold", i+1, q.Text, history.ApproxSize(n), history.ApproxSize(MaxOutputBytes))
		} else if size > MaxOutputBytes {
			return nil, fmt.Errorf("the answers up to question %d (%q) take %s, more than the %s a tool's output may hold", i+1, q.Text, history.ApproxSize(size), history.ApproxSize(MaxOutputBytes))
		}
	}
	return out, nil
}

// picked reads a multi's answer: a list of some of options, each at most
// once (so that reading it costs no more than the options).
func picked(options []string, v any) ([]string, bool) {
	list, ok := v.([]any)
	if !ok || len(list) > len(options) {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, o := range list {
		s, ok := o.(string)
		if !ok || !slices.Contains(options, s) || slices.Contains(out, s) {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// Choosable says whether every question is a choice or a confirm, so that
// the form can be asked one permission request per question.
func Choosable(qs []Question) bool {
	for _, q := range qs {
		if q.Type != "choice" && q.Type != "confirm" {
			return false
		}
	}
	return true
}
