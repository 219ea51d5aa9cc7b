package fetch

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"
)

// kind is what Get does with a body.
type kind int

const (
	kindBinary kind = iota // refused
	kindHTML               // converted to Markdown
	kindJSON               // pretty-printed when it parses
	kindText               // passed through
)

// genericTypes say nothing about the body, so the body itself is sniffed.
var genericTypes = map[string]bool{
	"":                         true,
	"application/octet-stream": true,
	"binary/octet-stream":      true,
	"application/binary":       true,
	"application/unknown":      true,
	"unknown/unknown":          true,
	"application/x-unknown":    true,
}

// textApplicationTypes are application/* types whose bodies are text a model
// can read: code, configuration and markup.
var textApplicationTypes = map[string]bool{
	"application/xml":                   true,
	"application/javascript":            true,
	"application/x-javascript":          true,
	"application/ecmascript":            true,
	"application/typescript":            true,
	"application/x-sh":                  true,
	"application/x-shellscript":         true,
	"application/yaml":                  true,
	"application/x-yaml":                true,
	"application/toml":                  true,
	"application/x-toml":                true,
	"application/sql":                   true,
	"application/graphql":               true,
	"application/x-ndjson":              true,
	"application/x-www-form-urlencoded": true,
	"application/x-tex":                 true,
	"application/x-httpd-php":           true,
	"application/x-perl":                true,
	"application/x-python":              true,
	"application/x-ruby":                true,
	"application/csv":                   true,
	"application/x-csv":                 true,
	"application/x-subrip":              true,
	"application/rtf":                   true,
}

// kindOf classifies a declared media type. decided is false for a missing
// or generic type, whose body must be sniffed.
func kindOf(mediaType string) (k kind, decided bool) {
	switch {
	case genericTypes[mediaType]:
		return kindBinary, false
	case mediaType == "text/html" || mediaType == "application/xhtml+xml":
		return kindHTML, true
	case mediaType == "application/json" || mediaType == "text/json" || strings.HasSuffix(mediaType, "+json"):
		return kindJSON, true
	case strings.HasPrefix(mediaType, "text/") || strings.HasSuffix(mediaType, "+xml") || textApplicationTypes[mediaType]:
		return kindText, true
	}
	return kindBinary, true
}

// sniff settles the kind of a body from its first bytes: for an undecided
// type with net/http.DetectContentType (the WHATWG sniffing algorithm), and
// for every textual kind with a NUL-byte check, because a NUL does not occur
// in text but a server that labels a binary file text/plain does occur. It
// returns the media type Page reports, which for a sniffed body is the
// sniffed one.
func sniff(k kind, decided bool, mediaType string, body []byte) (kind, string) {
	head := body[:min(len(body), 512)]
	if !decided {
		declared := mediaType
		mediaType, _ = parseContentType(http.DetectContentType(head))
		switch {
		case mediaType == "text/html":
			k = kindHTML
		case strings.HasPrefix(mediaType, "text/") || strings.HasSuffix(mediaType, "+xml"):
			k = kindText
			// DetectContentType has no JSON signature; JSON served
			// without a useful type is still JSON to the model.
			if t := bytes.TrimSpace(body); len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t) {
				k, mediaType = kindJSON, "application/json"
			}
		default:
			k = kindBinary
			if mediaType == "application/octet-stream" && declared != "" {
				mediaType = declared
			}
		}
	}
	if k != kindBinary && bytes.IndexByte(head, 0) >= 0 {
		k = kindBinary
		if !decided {
			mediaType = "application/octet-stream"
		}
	}
	return k, mediaType
}

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// decodeText turns a body into a string. Charsets: UTF-8 is decoded as is,
// and so is any body that is valid UTF-8 whatever its label says, because
// pages labelled latin-1 but written in UTF-8 are far more common than
// latin-1 text that happens to be valid UTF-8. Otherwise the windows-1252
// family (which by the WHATWG Encoding standard includes the iso-8859-1,
// latin1 and us-ascii labels) is decoded with a table. Any other charset is
// left as it is, with invalid UTF-8 replaced by U+FFFD:
// golang.org/x/net/html/charset would decode it, but it needs
// golang.org/x/text, which go.mod does not provide, and legacy charsets other
// than windows-1252 are rare on the pages a coding agent reads.
//
// A truncated body may end inside a UTF-8 sequence; that partial character
// is dropped rather than turned into U+FFFD.
func decodeText(b []byte, charset string, truncated bool) string {
	b = bytes.TrimPrefix(b, utf8BOM)
	if truncated {
		b = trimPartialRune(b)
	}
	if utf8.Valid(b) {
		return string(b)
	}
	switch strings.ToLower(strings.TrimSpace(charset)) {
	case "windows-1252", "cp1252", "x-cp1252", "iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "l1",
		"us-ascii", "ascii", "iso-ir-100", "csisolatin1", "ibm819", "cp819":
		return decodeWindows1252(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// windows1252 maps the bytes 0x80 to 0x9F, where windows-1252 differs from
// latin-1; a zero entry is undefined and decodes to the same code point.
var windows1252 = [32]rune{
	'€', 0, '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', 0, 'Ž', 0,
	0, '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', 0, 'ž', 'Ÿ',
}

func decodeWindows1252(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b) + len(b)/4)
	for _, c := range b {
		r := rune(c)
		if c >= 0x80 && c <= 0x9F && windows1252[c-0x80] != 0 {
			r = windows1252[c-0x80]
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// metaCharsetRE finds a charset declared in an HTML <meta> tag, in either
// the <meta charset> or the http-equiv form.
var metaCharsetRE = regexp.MustCompile(`(?i)<meta[^>]+charset\s*=\s*["']?\s*([a-z0-9_:.\-]+)`)

// metaCharset returns the charset a page declares in its first 1024 bytes,
// where the HTML standard requires the declaration to be.
func metaCharset(body []byte) string {
	m := metaCharsetRE.FindSubmatch(body[:min(len(body), 1024)])
	if m == nil {
		return ""
	}
	return string(m[1])
}

// prettyJSON indents JSON that parses, because the model reads nested
// structures better one value a line; anything else, such as JSON cut at
// MaxBytes or JSON lines, is returned as is.
func prettyJSON(s string) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(strings.TrimSpace(s)), "", "  "); err != nil {
		return s
	}
	return buf.String()
}
