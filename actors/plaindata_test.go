package actors

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// messages are the types the actors of this package send each other and
// answer with: every one is walked by TestMessagesArePlainData, and
// TestEveryMessageIsListed fails on one sent or received here that is
// not in this list.
var messages = []any{
	// to a session
	StartTurn{}, CancelTurns{}, CancelRequest{}, Announce{}, Replay{}, Resume{}, Attach{}, SetMode{}, SetModel{},
	SetSandbox{}, SetNetwork{}, Flush{}, Forget{}, GetState{}, settle{}, endSession{}, unstash{},
	// answers
	TurnResult{}, Outcome{}, Done{}, SessionState{},
	// a session's own: its store, its work goroutines, its MCP servers
	persisted{}, fileFinal{}, workDone{}, fenced{}, holds{}, reloaded{}, promptReady{}, mcpChanged{}, mcpWarning{},
	// the turn serializer
	acquireSlot{}, releaseSlot{}, slotGranted{}, checkWaits{}, slotQueue{},
	// the model's actor
	runModel{}, modelDelta{}, modelDone{}, compactDone{},
	// a tool's worker
	toolPrepared{}, toolStarted{}, toolProgress{}, toolAsking{}, toolAnswered{}, toolRemember{},
	toolFinished{}, toolProceed{},
	// the runtime's own, on a session's PID
	given{}, opened{}, drain{}, drained{},
}

// notYetData are the fields that still carry something other than data,
// each with what it carries: issue 45 takes them out one by one. A field
// that is not here and carries a channel, a func, an interface (other
// than any, which holds decoded JSON in the ACP SDK's types and in the
// tools' arguments), a mutex or an atomic fails the test.
var notYetData = map[string]string{}

// dataLeaf are types taken as data without looking inside: a PID is an
// address and an id (its protobuf state is the runtime's, never
// another actor's).
var dataLeaf = []reflect.Type{reflect.TypeFor[actor.PID]()}

func TestMessagesArePlainData(t *testing.T) {
	for _, m := range messages {
		typ := reflect.TypeOf(m)
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := typ.Name() + "." + f.Name
			why := notData(f.Type, map[reflect.Type]bool{})
			_, listed := notYetData[name]
			switch {
			case why != "" && !listed:
				t.Errorf("%s carries %s: a message is plain data (ids, strings, numbers, slices of data)", name, why)
			case why != "" && listed:
				t.Logf("%s still carries %s (%s)", name, why, notYetData[name])
			case why == "" && listed:
				t.Errorf("%s is data now: take it out of notYetData", name)
			}
		}
	}
}

// notData says what in t is not plain data, "" when nothing is.
func notData(t reflect.Type, seen map[reflect.Type]bool) string {
	if seen[t] || slices.Contains(dataLeaf, t) {
		return ""
	}
	seen[t] = true
	switch t.PkgPath() + "." + t.Name() {
	case "sync.Mutex", "sync.RWMutex", "sync.Cond", "sync.WaitGroup", "sync.Once", "sync.Map":
		return "a " + t.String()
	}
	if strings.HasPrefix(t.PkgPath(), "sync/atomic") {
		return "an atomic " + t.String()
	}
	switch t.Kind() {
	case reflect.Chan:
		return "a channel (" + t.String() + ")"
	case reflect.Func:
		return "a func (" + t.String() + ")"
	case reflect.UnsafePointer:
		return "an unsafe pointer"
	case reflect.Interface:
		if t.NumMethod() == 0 {
			return "" // any: a decoded JSON value
		}
		return "an interface (" + t.String() + ")"
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return notData(t.Elem(), seen)
	case reflect.Map:
		if w := notData(t.Key(), seen); w != "" {
			return w
		}
		return notData(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if w := notData(f.Type, seen); w != "" {
				return w + " in " + t.String() + "." + f.Name
			}
		}
	}
	return ""
}

// TestEveryMessageIsListed reads the package's source: a type sent
// (Send, Respond, Request, Deliver) as a composite literal, or received
// (a type switch's case), is in messages.
func TestEveryMessageIsListed(t *testing.T) {
	listed := map[string]bool{}
	for _, m := range messages {
		listed[reflect.TypeOf(m).Name()] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || len(n.Args) == 0 {
					return true
				}
				switch sel.Sel.Name {
				case "Send", "Respond", "Request", "RequestFuture", "Deliver":
				default:
					return true
				}
				arg := n.Args[len(n.Args)-1]
				if sel.Sel.Name == "RequestFuture" && len(n.Args) == 3 {
					arg = n.Args[1]
				}
				if u, ok := arg.(*ast.UnaryExpr); ok {
					arg = u.X
				}
				if c, ok := arg.(*ast.CompositeLit); ok {
					if id, ok := c.Type.(*ast.Ident); ok {
						found[id.Name] = fset.Position(n.Pos()).String()
					}
				}
			case *ast.TypeSwitchStmt:
				for _, s := range n.Body.List {
					for _, e := range s.(*ast.CaseClause).List {
						if st, ok := e.(*ast.StarExpr); ok {
							if id, ok := st.X.(*ast.Ident); ok {
								found[id.Name] = fset.Position(e.Pos()).String()
							}
						}
					}
				}
			}
			return true
		})
	}
	for name, at := range found {
		if !listed[name] {
			t.Errorf("%s (%s) is a message not in messages: list it, so that TestMessagesArePlainData walks it", name, at)
		}
	}
}
