package sandbox

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"strings"
)

// Ident is a user a confined command runs as, as plain data: its ids, and
// its name and home for the command's environment.
type Ident struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Name string `json:"name,omitempty"`
}

// String names the user as id(1) would, for messages.
func (u Ident) String() string {
	if u.Name != "" {
		return fmt.Sprintf("%s (%d:%d)", u.Name, u.UID, u.GID)
	}
	return fmt.Sprintf("%d:%d", u.UID, u.GID)
}

// LookupUser reads sandbox.user: a user's name ("nobody"), a uid, or
// "uid:gid". A name takes its group from the system's user database; a
// bare uid takes the gid of the same number. Root is refused: a confined
// command must hold less than mm.
func LookupUser(s string) (*Ident, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("no user named")
	}
	var id Ident
	if u, g, ok := strings.Cut(s, ":"); ok {
		uid, err1 := strconv.ParseUint(u, 10, 32)
		gid, err2 := strconv.ParseUint(g, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("user %q: want a name, a uid or uid:gid", s)
		}
		id = Ident{UID: uint32(uid), GID: uint32(gid)}
		if pw, err := user.LookupId(u); err == nil {
			id.Name = pw.Username
		}
	} else if uid, err := strconv.ParseUint(s, 10, 32); err == nil {
		id = Ident{UID: uint32(uid), GID: uint32(uid)}
		if pw, err := user.LookupId(s); err == nil {
			id.Name = pw.Username
			if gid, err := strconv.ParseUint(pw.Gid, 10, 32); err == nil {
				id.GID = uint32(gid)
			}
		}
	} else {
		pw, err := user.Lookup(s)
		if err != nil {
			return nil, fmt.Errorf("user %q: %v", s, err)
		}
		uid, err1 := strconv.ParseUint(pw.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(pw.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("user %q has no numeric ids here (%s:%s)", s, pw.Uid, pw.Gid)
		}
		id = Ident{UID: uint32(uid), GID: uint32(gid), Name: pw.Username}
	}
	if id.UID == 0 || id.GID == 0 {
		return nil, fmt.Errorf("user %q is root (uid or gid 0): a confined command must run with less than mm has", s)
	}
	return &id, nil
}
