package mcpclient

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// URL mode elicitation (MCP 2025-11-25): a server asks its user to open a
// page — a sign-in to a third party, a consent — and waits. mm claims the
// capability only for a session whose client can show such a page
// (Options.ElicitURL); the server's request goes to the tool call it
// comes during, whose worker set an Asker on the call's context
// (WithAsker). A request outside any call, or of another mode, is
// declined: no one is there to ask.

// URLElicitation is a server's request that the user open a page.
type URLElicitation struct {
	Server  string // the server's name in mm's config or the editor's list
	ID      string // the server's id for it (elicitationId)
	URL     string // http or https
	Message string
}

// Asker shows a URLElicitation to the user and returns what they did:
// accept, decline or cancel.
type Asker func(ctx context.Context, e URLElicitation) (action string, err error)

type askerKey struct{}

// WithAsker returns ctx, which a tool call's Call is given, with a the
// way to the user for the URL elicitations of that call's server.
func WithAsker(ctx context.Context, a Asker) context.Context {
	return context.WithValue(ctx, askerKey{}, a)
}

// Bounds of what a server may ask, in bytes.
const (
	maxElicitURL     = 8 << 10
	maxElicitMessage = 4 << 10
	maxElicitID      = 256
)

// askers are the calls of one server in flight whose worker can ask.
type askers struct {
	mu   sync.Mutex
	list []*asking
}

type asking struct {
	ask Asker
	ctx context.Context // the call's: its end ends the question
}

func (a *askers) push(x *asking) {
	a.mu.Lock()
	a.list = append(a.list, x)
	a.mu.Unlock()
}

func (a *askers) pop(x *asking) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, y := range a.list {
		if y == x {
			a.list = append(a.list[:i], a.list[i+1:]...)
			return
		}
	}
}

// last is the call most recently begun, nil when none is in flight.
func (a *askers) last() *asking {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.list) == 0 {
		return nil
	}
	return a.list[len(a.list)-1]
}

// elicit is the server's elicitation/create: a URL elicitation during a
// call goes to the user; anything else is declined.
func (c *conn) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	decline := &mcp.ElicitResult{Action: "decline"}
	p := req.Params
	if p == nil || p.Mode != "url" {
		c.s.warn(fmt.Sprintf("MCP server %q asked for a form: mm shows only pages (URL elicitation); declined", c.srv.Name))
		return decline, nil
	}
	if why := checkURLElicitation(p); why != "" {
		c.s.warn(fmt.Sprintf("MCP server %q asked the user to open a page, %s; declined", c.srv.Name, why))
		return decline, nil
	}
	a := c.askers.last()
	if a == nil {
		c.s.warn(fmt.Sprintf("MCP server %q asked the user to open a page outside any call of its tools; declined", c.srv.Name))
		return decline, nil
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(a.ctx, cancel)
	defer stop()
	action, err := a.ask(actx, URLElicitation{Server: c.srv.Name, ID: p.ElicitationID, URL: p.URL, Message: p.Message})
	if err != nil {
		return &mcp.ElicitResult{Action: "cancel"}, nil
	}
	return &mcp.ElicitResult{Action: action}, nil
}

// checkURLElicitation says what is wrong with a server's URL elicitation,
// "" when nothing is: a page is http or https, with a host, and the
// request is of a size a person reads. The URL shows the user what they
// open, so it holds no character that shows other than it reads — no
// bidirectional control (U+202E turns "…/gpj.exe" into what reads
// "…/exe.jpg"), no invisible or format character, no control character
// — as it is written or once its %-escapes are decoded, as a client may
// show it; nor is it anything but valid UTF-8.
func checkURLElicitation(p *mcp.ElicitParams) string {
	switch {
	case len(p.URL) > maxElicitURL:
		return fmt.Sprintf("whose URL is %d bytes long", len(p.URL))
	case len(p.Message) > maxElicitMessage:
		return fmt.Sprintf("with a message %d bytes long", len(p.Message))
	case p.ElicitationID == "" || len(p.ElicitationID) > maxElicitID:
		return "without an id of at most 256 bytes"
	}
	if r, bad := hiddenRune(p.URL, true); bad {
		return fmt.Sprintf("whose URL holds %U, a character that is not shown as it reads", r)
	}
	if dec, err := url.PathUnescape(p.URL); err == nil {
		if r, bad := hiddenRune(dec, false); bad {
			return fmt.Sprintf("whose URL holds %U %%-escaped, a character that is not shown as it reads", r)
		}
	}
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return fmt.Sprintf("%q, which is no http or https page", p.URL)
	}
	return ""
}

// hiddenRune finds in s a rune that is not shown as it reads: a format
// character (Unicode's Cf: the bidirectional controls, zero-width spaces
// and joiners, the soft hyphen, the byte-order mark, tags), a control
// character (Cc), a bidirectional mark outside Cf, a character ignored
// by default (Hangul fillers, variation selectors), a space or separator
// other than ' ' (and ' ' itself in the URL as written, which
// escapes it), or invalid UTF-8 (utf8.RuneError).
func hiddenRune(s string, raw bool) (rune, bool) {
	for _, r := range s {
		switch {
		case r == ' ':
			if raw {
				return r, true
			}
		case r == utf8.RuneError, unicode.In(r, unicode.Cf, unicode.Cc, unicode.Bidi_Control, unicode.Z,
			unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector):
			return r, true
		}
	}
	return 0, false
}

// capabilities are what mm claims to its servers: URL elicitation when
// the session's client shows pages, else nothing.
func (s *Sessions) capabilities() *mcp.ClientCapabilities {
	if !s.elicitURL {
		return &mcp.ClientCapabilities{}
	}
	return &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}}
}

// elicitation is the handler of the server's elicitation/create, nil when
// mm claims no elicitation.
func (c *conn) elicitation() func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	if !c.s.elicitURL {
		return nil
	}
	return c.elicit
}
