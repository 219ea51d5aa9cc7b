package llm

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// scriptDocs is the user's guide to the script format.
const scriptDocs = "../docs/scripted-model.md"

// TestScriptDocsListEveryKey keeps docs/scripted-model.md in step with the
// parser: every key a script may hold is in one of its tables, and every
// template is named.
func TestScriptDocsListEveryKey(t *testing.T) {
	b, err := os.ReadFile(scriptDocs)
	if err != nil {
		t.Fatal(err)
	}
	docs := string(b)
	for _, v := range []any{scriptFile{}, ruleFile{}, stepFile{}} {
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			key := strings.Split(typ.Field(i).Tag.Get("yaml"), ",")[0]
			if !strings.Contains(docs, "| `"+key+"` |") {
				t.Errorf("%s does not document the %s key `%s` in a table", scriptDocs, typ.Name(), key)
			}
		}
	}
	for _, key := range []string{"toolCalls[].name", "toolCalls[].args"} {
		if !strings.Contains(docs, "| `"+key+"` |") {
			t.Errorf("%s does not document `%s`", scriptDocs, key)
		}
	}
	for _, tmpl := range []string{tmplToolOutput, tmplUserText} {
		if !strings.Contains(docs, "`"+tmpl+"`") {
			t.Errorf("%s does not document the template %s", scriptDocs, tmpl)
		}
	}
}

// TestScriptDocsExamplesParse: the scripts the guide shows are valid.
func TestScriptDocsExamplesParse(t *testing.T) {
	b, err := os.ReadFile(scriptDocs)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	// A fence closes at the start of a line only: the scripts' own texts
	// may hold indented fences.
	for _, m := range regexp.MustCompile("(?ms)^```yaml\n(.*?)^```$").FindAllStringSubmatch(string(b), -1) {
		if !strings.Contains(m[1], "steps:") {
			continue // a config, not a script
		}
		n++
		if _, err := ParseScript([]byte(m[1])); err != nil {
			t.Errorf("a script in %s does not parse: %v\n%s", scriptDocs, err, m[1])
		}
	}
	if n == 0 {
		t.Errorf("%s shows no script", scriptDocs)
	}
}
