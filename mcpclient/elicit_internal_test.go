package mcpclient

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestURLElicitationHidesNothing: a page to open is refused when its URL
// holds a character that is not shown as it reads — a right-to-left
// override (issue 42: one passed), any other bidirectional control, an
// invisible or format character, a control character, a space — as
// written or %-escaped; an ordinary URL, international ones included,
// passes.
func TestURLElicitationHidesNothing(t *testing.T) {
	check := func(u string) string {
		return checkURLElicitation(&mcp.ElicitParams{Mode: "url", URL: u, ElicitationID: "e1", Message: "Sign in"})
	}
	for _, u := range []string{
		"https://login.example.com/start?x=1",
		"https://example.com/a%20b?q=%C3%A9t%C3%A9#top",
		"https://例え.jp/パス",
		"https://example.com/עברית/عربي",
		"http://127.0.0.1:8080/cb",
	} {
		if why := check(u); why != "" {
			t.Errorf("%q refused: %s", u, why)
		}
	}
	for _, u := range []string{
		"https://example.com/\u202egpj.exe",           // right-to-left override
		"https://example.com/\u202dx",                 // left-to-right override
		"https://exa\u202bmple.com/",                  // right-to-left embedding
		"https://example.com/\u2067x\u2069",           // right-to-left isolate
		"https://example.com/\u200fx",                 // right-to-left mark
		"https://example.com/\u061cx",                 // Arabic letter mark
		"https://example.com/%E2%80%AEgpj.exe",        // the override, %-escaped
		"https://good.com\u200b.evil.com/",            // zero-width space
		"https://example.com/a\u200db",                // zero-width joiner
		"https://example.com/\ufeffx",                 // byte-order mark
		"https://example.com/soft\u00adhyphen",        // soft hyphen
		"https://example.com/\U000E0041",              // a tag
		"https://example.com/\u3164",                  // Hangul filler
		"https://example.com/x\ufe0f",                 // variation selector
		"https://example.com/\u0085",                  // a C1 control
		"https://example.com/%0Ax",                    // a newline, %-escaped
		"https://good.com\u00a0.evil.com/",            // no-break space
		"https://example.com/a b",                     // a space as written
		"https://example.com/\u2028",                  // line separator
		"https://example.com/" + string([]byte{0xff}), // not UTF-8
	} {
		why := check(u)
		if why == "" {
			t.Errorf("%q passed", u)
		} else if !strings.Contains(why, "not shown as it reads") && !strings.Contains(why, "no http or https page") {
			t.Errorf("%q: %s", u, why)
		}
	}
}
