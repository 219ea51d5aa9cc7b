package serve

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/coder/websocket"
)

// Token is one bearer token and the name of its holder, the owner of the
// sessions it creates.
type Token struct {
	Name   string
	Secret string
}

// keyring checks bearer tokens. Each secret is kept as its SHA-256 digest,
// and a presented token is hashed and compared with every digest, all of
// them, with subtle.ConstantTimeCompare: the time taken says neither which
// token came close nor how long the tokens are.
type keyring struct {
	names   []string
	digests [][sha256.Size]byte
}

func newKeyring(tokens []Token) *keyring {
	k := &keyring{}
	for _, t := range tokens {
		k.names = append(k.names, t.Name)
		k.digests = append(k.digests, sha256.Sum256([]byte(t.Secret)))
	}
	return k
}

// owner returns the name of the token r carries in its Authorization
// header ("Bearer <token>"), or false.
func (k *keyring) owner(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		// A browser cannot set Authorization on a WebSocket: its upgrade
		// may carry the token as a subprotocol instead, never in the URL.
		if token, ok = tokenProtocol(r); !ok {
			return "", false
		}
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(token)))
	found := -1
	for i := range k.digests {
		if subtle.ConstantTimeCompare(d[:], k.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return k.names[found], true
}

// allowedOrigin says whether r may come in as far as its Origin goes: a
// request without one (an editor, a script, curl) may; a browser's must be
// listed. A web page the user opens must not drive a local agent, and
// browsers send Origin with every WebSocket upgrade and cross-site POST.
func allowedOrigin(r *http.Request, allowed []string) bool {
	origin, sent := r.Header["Origin"]
	if !sent {
		return true
	}
	for _, o := range origin {
		ok := false
		for _, a := range allowed {
			ok = ok || strings.EqualFold(strings.TrimSuffix(a, "/"), o)
		}
		if !ok {
			return false
		}
	}
	return true
}

// NewSecret returns a random token: 32 bytes of crypto/rand, as text.
func NewSecret() string { return rand.Text() + rand.Text() }

// TokenProtocol is the prefix of the WebSocket subprotocol that carries a
// token (`mm-token.<token>`), for a browser, which cannot set
// Authorization on a WebSocket. The server answers with the subprotocol
// "acp" when the client offers it too, else with the token's.
const TokenProtocol = "mm-token."

// tokenProtocol is the token an upgrade offers as a subprotocol.
func tokenProtocol(r *http.Request) (string, bool) {
	if p := offeredTokenProtocol(r); p != "" {
		return strings.TrimPrefix(p, TokenProtocol), true
	}
	return "", false
}

// offeredTokenProtocol is the subprotocol of an upgrade that carries a
// token, "" when none does.
func offeredTokenProtocol(r *http.Request) string {
	if !isUpgrade(r) {
		return ""
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, TokenProtocol) {
				return p
			}
		}
	}
	return ""
}

// acceptOptions are the options of an upgrade's Accept: the subprotocol
// chosen among those offered ("acp" first, else the token's, which must
// be echoed for a browser to go on).
func acceptOptions(r *http.Request) *websocket.AcceptOptions {
	o := &websocket.AcceptOptions{
		// The Origin header was checked against serve.allowedOrigins
		// before the token; Accept's own check (same host only) would
		// refuse a listed origin.
		InsecureSkipVerify: true,
		Subprotocols:       []string{"acp"},
	}
	if p := offeredTokenProtocol(r); p != "" {
		o.Subprotocols = append(o.Subprotocols, p)
	}
	return o
}
