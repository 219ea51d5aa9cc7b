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
// -attack makes the server hostile once it is initialized (see attack.go):
// it writes a header that never ends, announces a gigantic body, sends
// header lines for ever, floods window/showMessageRequest while reading
// nothing, floods window/logMessage, or answers nothing at all.
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
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/mm-agent/mm/internal/procs"
)

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
	attack     string

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
	attack := flags.String("attack", "", "misbehave once initialized: "+strings.Join(Attacks, ", "))
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
		attack:     *attack,
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
		if f.mute(m) {
			continue
		}
		if exit, code := f.handle(m); exit {
			return code
		}
	}
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
		if f.attack != "" {
			f.startAttack()
		}
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
