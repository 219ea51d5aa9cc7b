package serve

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
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
		return "", false
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
