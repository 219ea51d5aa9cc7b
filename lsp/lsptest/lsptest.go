// Package lsptest is a scripted language server for mm's tests (package
// lsp's, and the end-to-end tests of the lsp tool). The tests run it as a
// real process (the test binary re-executed under the name "fakelsp",
// calling Main), and it speaks LSP over stdin and stdout with
// Content-Length framing, like a real server.
//
// It understands files by regular expressions, not by parsing: a
// declaration is a line "func Name", "func (r T) Name", "type Name", "var
// Name" or "const Name"; the definition of a name is its declaration;
// its references are every whole-word occurrence in the files under the
// workspace root with the same extension, open documents taking the place
// of the disk's text as in a real server. Positions are converted to and
// from UTF-16 independently of package lsp, so that the tests check lsp's
// conversion against a second implementation.
//
// Some names script behaviours: hovering, or asking anything, about
// "Slow" waits until the request is cancelled; about "Crash" exits with
// status 3; about "Stall" stops reading stdin for good; hover on a name starting with "Legacy" answers with the old
// MarkedString forms, definition of a name starting with "Link" with
// LocationLinks; renaming to "MakeFile" answers with a file creation.
//
// Every message received is appended as a JSON line to the file named by
// -record, with the pid of the server, so that tests can see what the
// server was told, and which process was told it.
package lsptest

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"

	"github.com/mm-agent/mm/internal/procs"
)

// Record is one line of the record file.
type Record struct {
	PID    int             `json:"pid"`
	Method string          `json:"method,omitempty"`
	ID     json.RawMessage `json:"id,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// Child is the pid of the child started with -child.
	Child int `json:"child,omitempty"`
	// Cwd, PGID and Session describe the server, in the "start" record:
	// its working directory, process group (0 on Windows) and MM_SESSION_ID.
	Cwd     string `json:"cwd,omitempty"`
	PGID    int    `json:"pgid,omitempty"`
	Session string `json:"session,omitempty"`
}

// ReadRecords reads a record file; a missing file has no records.
func ReadRecords(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("record %q: %w", line, err)
		}
		out = append(out, r)
	}
	return out, nil
}

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

type doc struct {
	text    string
	version int
}

type fake struct {
	record     *os.File
	changes    bool
	flat       bool
	ignoreExit bool

	wmu sync.Mutex // writes to stdout
	out io.Writer

	mu       sync.Mutex
	root     string
	docs     map[string]*doc          // by path
	pending  map[string]chan struct{} // slow requests by id
	shutdown bool
}

// Main runs the fake server with its arguments and returns its exit status.
func Main(args []string) int {
	flags := flag.NewFlagSet("fakelsp", flag.ContinueOnError)
	record := flags.String("record", "", "append every message received to this file")
	changes := flags.Bool("changes", false, "answer rename in the changes form instead of documentChanges")
	flat := flags.Bool("flat", false, "answer documentSymbol with SymbolInformation")
	ignoreExit := flags.Bool("ignore-exit", false, "ignore exit, and the end of stdin")
	child := flags.Bool("child", false, "start a sleeping child in the process group, holding stderr")
	exitAtStart := flags.Bool("exit-at-start", false, "write to stderr and exit with status 2 at once")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *exitAtStart {
		fmt.Fprintln(os.Stderr, "fakelsp: cannot start: no workspace here")
		return 2
	}
	f := &fake{
		changes:    *changes,
		flat:       *flat,
		ignoreExit: *ignoreExit,
		out:        os.Stdout,
		docs:       map[string]*doc{},
		pending:    map[string]chan struct{}{},
	}
	if *record != "" {
		rf, err := os.OpenFile(*record, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakelsp:", err)
			return 2
		}
		defer rf.Close()
		f.record = rf
	}
	wd, _ := os.Getwd()
	f.write(Record{Method: "start", Cwd: wd, PGID: procs.GroupID(), Session: os.Getenv("MM_SESSION_ID")})
	if *child {
		exe, _ := os.Executable()
		cmd := exec.Command(exe, "fakelsp-child")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "fakelsp: child:", err)
			return 2
		}
		f.write(Record{Method: "child", Child: cmd.Process.Pid})
	}
	fmt.Fprintln(os.Stderr, "fakelsp: started")

	in := bufio.NewReader(os.Stdin)
	for {
		body, err := readMessage(in)
		if err != nil {
			if f.ignoreExit {
				time.Sleep(time.Hour)
			}
			return 0
		}
		var m message
		if err := json.Unmarshal(body, &m); err != nil {
			fmt.Fprintln(os.Stderr, "fakelsp: bad message:", err)
			return 2
		}
		f.write(Record{Method: m.Method, ID: m.ID, Params: m.Params, Result: m.Result})
		if m.Method == "" {
			continue // a response to a request of ours
		}
		if exit, code := f.handle(m); exit {
			return code
		}
	}
}

// write appends a record, in one write so that records from a crashed and
// a restarted server do not mix.
func (f *fake) write(r Record) {
	if f.record == nil {
		return
	}
	r.PID = os.Getpid()
	b, _ := json.Marshal(r)
	_, _ = f.record.Write(append(b, '\n'))
}

func readMessage(r *bufio.Reader) ([]byte, error) {
	length := -1
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimSpace(line)
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			length, err = strconv.Atoi(strings.TrimSpace(value))
			if err != nil {
				return nil, err
			}
		}
	}
	if length < 0 {
		return nil, fmt.Errorf("no Content-Length")
	}
	body := make([]byte, length)
	_, err := io.ReadFull(r, body)
	return body, err
}

func (f *fake) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	fmt.Fprintf(f.out, "Content-Length: %d\r\n\r\n%s", len(b), b)
}

func (f *fake) reply(id json.RawMessage, result any) {
	f.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (f *fake) fail(id json.RawMessage, code int, msg string) {
	f.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}

type position struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

type rng struct {
	Start position `json:"start"`
	End   position `json:"end"`
}

type location struct {
	URI   string `json:"uri"`
	Range rng    `json:"range"`
}

type positionParams struct {
	TextDocument struct {
		URI string `json:"uri"`
	} `json:"textDocument"`
	Position position `json:"position"`
	Context  struct {
		IncludeDeclaration bool `json:"includeDeclaration"`
	} `json:"context"`
	NewName string `json:"newName"`
}

func (f *fake) handle(m message) (exit bool, code int) {
	switch m.Method {
	case "initialize":
		var p struct {
			RootURI string `json:"rootUri"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		f.root = pathOf(p.RootURI)
		f.mu.Unlock()
		f.reply(m.ID, map[string]any{
			"capabilities": map[string]any{
				"textDocumentSync":       1,
				"definitionProvider":     true,
				"referencesProvider":     map[string]any{},
				"hoverProvider":          true,
				"documentSymbolProvider": true,
				"renameProvider":         map[string]any{"prepareProvider": false},
				"workspace": map[string]any{
					"workspaceFolders": map[string]any{"supported": true, "changeNotifications": "ws"},
				},
			},
			"serverInfo": map[string]any{"name": "fakelsp", "version": "0"},
		})
	case "initialized":
		f.send(map[string]any{"jsonrpc": "2.0", "method": "window/logMessage",
			"params": map[string]any{"type": 3, "message": "fakelsp is ready"}})
		f.send(map[string]any{"jsonrpc": "2.0", "id": "cfg-1", "method": "workspace/configuration",
			"params": map[string]any{"items": []any{map[string]any{"section": "fake"}}}})
		f.send(map[string]any{"jsonrpc": "2.0", "id": "refresh-1", "method": "workspace/semanticTokens/refresh"})
		fmt.Fprintln(os.Stderr, "fakelsp: initialized")
	case "shutdown":
		f.mu.Lock()
		f.shutdown = true
		f.mu.Unlock()
		f.reply(m.ID, nil)
	case "exit":
		if f.ignoreExit {
			return false, 0
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.shutdown {
			return true, 0
		}
		return true, 1
	case "$/cancelRequest":
		var p struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		if ch, ok := f.pending[string(p.ID)]; ok {
			close(ch)
			delete(f.pending, string(p.ID))
		}
		f.mu.Unlock()
	case "textDocument/didOpen":
		var p struct {
			TextDocument struct {
				URI     string `json:"uri"`
				Text    string `json:"text"`
				Version int    `json:"version"`
			} `json:"textDocument"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		f.docs[pathOf(p.TextDocument.URI)] = &doc{p.TextDocument.Text, p.TextDocument.Version}
		f.mu.Unlock()
	case "textDocument/didChange":
		var p struct {
			TextDocument struct {
				URI     string `json:"uri"`
				Version int    `json:"version"`
			} `json:"textDocument"`
			ContentChanges []struct {
				Range *rng   `json:"range"`
				Text  string `json:"text"`
			} `json:"contentChanges"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		d := f.docs[pathOf(p.TextDocument.URI)]
		if d == nil {
			fmt.Fprintln(os.Stderr, "fakelsp: didChange of a document that is not open")
		} else {
			for _, c := range p.ContentChanges {
				if c.Range != nil {
					// This server announced full sync: a range is a bug in
					// the client.
					fmt.Fprintln(os.Stderr, "fakelsp: didChange with a range under full sync")
				}
				d.text = c.Text
			}
			d.version = p.TextDocument.Version
		}
		f.mu.Unlock()
	case "textDocument/didClose":
		var p struct {
			TextDocument struct {
				URI string `json:"uri"`
			} `json:"textDocument"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		delete(f.docs, pathOf(p.TextDocument.URI))
		f.mu.Unlock()
	case "textDocument/definition", "textDocument/references", "textDocument/hover", "textDocument/rename":
		f.positional(m)
	case "textDocument/documentSymbol":
		var p positionParams
		_ = json.Unmarshal(m.Params, &p)
		f.reply(m.ID, f.symbols(pathOf(p.TextDocument.URI)))
	default:
		if len(m.ID) > 0 {
			f.fail(m.ID, -32601, "method not found: "+m.Method)
		}
	}
	return false, 0
}

// positional answers the requests about a position.
func (f *fake) positional(m message) {
	var p positionParams
	_ = json.Unmarshal(m.Params, &p)
	path := pathOf(p.TextDocument.URI)
	word := f.wordAt(path, p.Position)
	switch {
	case word == "":
		f.fail(m.ID, -32603, "no identifier found")
		return
	case word == "Crash":
		fmt.Fprintln(os.Stderr, "panic: fakelsp crashed on purpose")
		os.Exit(3)
	case word == "Stall":
		// Stop reading stdin, as a server stuck in a loop does, until
		// killed.
		time.Sleep(time.Hour)
	case word == "Slow":
		ch := make(chan struct{})
		f.mu.Lock()
		f.pending[string(m.ID)] = ch
		f.mu.Unlock()
		go func() {
			select {
			case <-ch:
				f.fail(m.ID, -32800, "request cancelled")
			case <-time.After(time.Minute):
				f.reply(m.ID, nil)
			}
		}()
		return
	}
	ext := filepath.Ext(path)
	switch m.Method {
	case "textDocument/definition":
		decls := f.find(ext, word, true)
		switch {
		case len(decls) == 0:
			f.reply(m.ID, nil)
		case strings.HasPrefix(word, "Link"):
			var links []map[string]any
			for _, d := range decls {
				links = append(links, map[string]any{"targetUri": d.URI, "targetRange": d.Range, "targetSelectionRange": d.Range})
			}
			f.reply(m.ID, links)
		case len(decls) == 1:
			f.reply(m.ID, decls[0])
		default:
			f.reply(m.ID, decls)
		}
	case "textDocument/references":
		refs := f.find(ext, word, false)
		if !p.Context.IncludeDeclaration {
			decls := f.find(ext, word, true)
			refs = subtract(refs, decls)
		}
		f.reply(m.ID, refs)
	case "textDocument/hover":
		f.reply(m.ID, f.hover(ext, word))
	case "textDocument/rename":
		if !regexp.MustCompile(`^[A-Za-z_]\w*$`).MatchString(p.NewName) {
			f.fail(m.ID, -32602, fmt.Sprintf("invalid identifier %q", p.NewName))
			return
		}
		f.reply(m.ID, f.rename(ext, word, p.NewName))
	}
}

var (
	identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	declRE  = regexp.MustCompile(`^\s*(?:func|type|var|const)\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)`)
)

// text is a file's text as this server knows it: the open document's, or
// the disk's.
func (f *fake) text(path string) string {
	f.mu.Lock()
	d := f.docs[path]
	f.mu.Unlock()
	if d != nil {
		return d.text
	}
	b, _ := os.ReadFile(path)
	return string(b)
}

// units counts the UTF-16 code units of s.
func units(s string) int {
	return len(utf16.Encode([]rune(s)))
}

// byteOffset converts a UTF-16 character offset into a byte offset in line.
func byteOffset(line string, char int) int {
	n := 0
	for i, r := range line {
		if n >= char {
			return i
		}
		n += len(utf16.Encode([]rune{r}))
	}
	return len(line)
}

func (f *fake) wordAt(path string, p position) string {
	ls := strings.Split(f.text(path), "\n")
	if p.Line >= len(ls) {
		return ""
	}
	line := ls[p.Line]
	off := byteOffset(line, p.Character)
	for _, loc := range identRE.FindAllStringIndex(line, -1) {
		if loc[0] <= off && off <= loc[1] {
			return line[loc[0]:loc[1]]
		}
	}
	return ""
}

// files lists the files under the root with the extension ext.
func (f *fake) files(ext string) []string {
	f.mu.Lock()
	root := f.root
	f.mu.Unlock()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(p) == ext {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// find returns the whole-word occurrences of word, or only its
// declarations, in file order.
func (f *fake) find(ext, word string, declsOnly bool) []location {
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(word) + `\b`)
	var out []location
	for _, path := range f.files(ext) {
		for i, line := range strings.Split(f.text(path), "\n") {
			if declsOnly {
				m := declRE.FindStringSubmatchIndex(line)
				if m != nil && line[m[2]:m[3]] == word {
					out = append(out, span(path, i, line, m[2], m[3]))
				}
				continue
			}
			for _, loc := range re.FindAllStringIndex(line, -1) {
				out = append(out, span(path, i, line, loc[0], loc[1]))
			}
		}
	}
	return out
}

func span(path string, line int, text string, start, end int) location {
	return location{URI: uriOf(path), Range: rng{
		Start: position{line, units(text[:start])},
		End:   position{line, units(text[:end])},
	}}
}

func subtract(all, some []location) []location {
	var out []location
	for _, a := range all {
		keep := true
		for _, s := range some {
			if a == s {
				keep = false
			}
		}
		if keep {
			out = append(out, a)
		}
	}
	return out
}

func (f *fake) hover(ext, word string) any {
	decls := f.find(ext, word, true)
	if len(decls) == 0 {
		return nil
	}
	d := decls[0]
	ls := strings.Split(f.text(pathOf(d.URI)), "\n")
	decl := strings.TrimSuffix(strings.TrimSpace(ls[d.Range.Start.Line]), " {")
	var comment []string
	for i := d.Range.Start.Line - 1; i >= 0 && strings.HasPrefix(ls[i], "//"); i-- {
		comment = append([]string{strings.TrimSpace(strings.TrimPrefix(ls[i], "//"))}, comment...)
	}
	if strings.HasPrefix(word, "Legacy") {
		return map[string]any{"contents": []any{
			strings.Join(comment, " "),
			map[string]any{"language": "go", "value": decl},
		}}
	}
	value := "```go\n" + decl + "\n```"
	if len(comment) > 0 {
		value += "\n\n" + strings.Join(comment, " ")
	}
	return map[string]any{"contents": map[string]any{"kind": "markdown", "value": value}}
}

var (
	structRE = regexp.MustCompile(`^type ([A-Za-z_]\w*) struct \{`)
	typeRE   = regexp.MustCompile(`^type ([A-Za-z_]\w*) `)
	fieldRE  = regexp.MustCompile(`^\s+([A-Za-z_]\w*)\s+\S`)
	methodRE = regexp.MustCompile(`^func \(\w+ \*?([A-Za-z_]\w*)\) ([A-Za-z_]\w*)`)
	funcRE   = regexp.MustCompile(`^func ([A-Za-z_]\w*)`)
	varRE    = regexp.MustCompile(`^(var|const) ([A-Za-z_]\w*)`)
)

type symbol struct {
	Name           string    `json:"name"`
	Detail         string    `json:"detail,omitempty"`
	Kind           int       `json:"kind"`
	Range          rng       `json:"range"`
	SelectionRange rng       `json:"selectionRange"`
	Children       []*symbol `json:"children,omitempty"`
}

// symbols outlines a file: structs with their fields and methods,
// other types, functions, variables and constants.
func (f *fake) symbols(path string) any {
	ls := strings.Split(f.text(path), "\n")
	var top []*symbol
	types := map[string]*symbol{}
	sym := func(i int, line string, m []int, kind int) *symbol {
		s := span(path, i, line, m[0], m[1])
		return &symbol{Name: line[m[0]:m[1]], Kind: kind, SelectionRange: s.Range,
			Range: rng{position{i, 0}, position{i, units(line)}}}
	}
	for i := 0; i < len(ls); i++ {
		line := ls[i]
		switch {
		case structRE.MatchString(line):
			m := structRE.FindStringSubmatchIndex(line)
			s := sym(i, line, m[2:4], 23)
			for i+1 < len(ls) && !strings.HasPrefix(ls[i+1], "}") {
				i++
				if fm := fieldRE.FindStringSubmatchIndex(ls[i]); fm != nil {
					field := sym(i, ls[i], fm[2:4], 8)
					field.Detail = strings.TrimSpace(ls[i][fm[3]:])
					s.Children = append(s.Children, field)
				}
			}
			types[s.Name] = s
			top = append(top, s)
		case typeRE.MatchString(line):
			m := typeRE.FindStringSubmatchIndex(line)
			s := sym(i, line, m[2:4], 5)
			types[s.Name] = s
			top = append(top, s)
		case methodRE.MatchString(line):
			m := methodRE.FindStringSubmatchIndex(line)
			s := sym(i, line, m[4:6], 6)
			if t := types[line[m[2]:m[3]]]; t != nil {
				t.Children = append(t.Children, s)
			} else {
				top = append(top, s)
			}
		case funcRE.MatchString(line):
			m := funcRE.FindStringSubmatchIndex(line)
			s := sym(i, line, m[2:4], 12)
			s.Detail = strings.TrimSuffix(strings.TrimSpace(line[m[3]:]), " {")
			top = append(top, s)
		case varRE.MatchString(line):
			m := varRE.FindStringSubmatchIndex(line)
			kind := 13
			if line[m[2]:m[3]] == "const" {
				kind = 14
			}
			top = append(top, sym(i, line, m[4:6], kind))
		}
	}
	if !f.flat {
		if top == nil {
			return []any{}
		}
		return top
	}
	var flat []map[string]any
	var walk func(s *symbol, container string)
	walk = func(s *symbol, container string) {
		info := map[string]any{"name": s.Name, "kind": s.Kind,
			"location": location{URI: uriOf(path), Range: s.SelectionRange}}
		if container != "" {
			info["containerName"] = container
		}
		flat = append(flat, info)
		for _, c := range s.Children {
			walk(c, s.Name)
		}
	}
	for _, s := range top {
		walk(s, "")
	}
	return flat
}

func (f *fake) rename(ext, word, newName string) any {
	refs := f.find(ext, word, false)
	if len(refs) == 0 {
		return nil
	}
	byURI := map[string][]map[string]any{}
	var uris []string
	for _, r := range refs {
		if _, ok := byURI[r.URI]; !ok {
			uris = append(uris, r.URI)
		}
		byURI[r.URI] = append(byURI[r.URI], map[string]any{"range": r.Range, "newText": newName})
	}
	if f.changes {
		return map[string]any{"changes": byURI}
	}
	var dcs []any
	if newName == "MakeFile" {
		dcs = append(dcs, map[string]any{"kind": "create", "uri": uriOf(filepath.Join(f.root, "new.go"))})
	}
	for _, u := range uris {
		var version any
		f.mu.Lock()
		if d := f.docs[pathOf(u)]; d != nil {
			version = d.version
		}
		f.mu.Unlock()
		// The edits go last to first, as some servers send them, to check
		// that the client does not depend on their order.
		edits := byURI[u]
		for i, j := 0, len(edits)-1; i < j; i, j = i+1, j-1 {
			edits[i], edits[j] = edits[j], edits[i]
		}
		dcs = append(dcs, map[string]any{
			"textDocument": map[string]any{"uri": u, "version": version},
			"edits":        edits,
		})
	}
	return map[string]any{"documentChanges": dcs}
}

func pathOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return filepath.FromSlash(p.Path)
}

func uriOf(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}
