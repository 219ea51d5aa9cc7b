package actors

import (
	"regexp"
	"testing"
)

// TestNewMessageID: a message id is a UUID, version 4, as ACP requires of
// message ids, and two are not the same.
func TestNewMessageID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := NewMessageID(), NewMessageID()
	if !re.MatchString(a) || !re.MatchString(b) || a == b {
		t.Errorf("%q and %q", a, b)
	}
}
