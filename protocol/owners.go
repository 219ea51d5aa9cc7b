package protocol

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// Folders have owners on a shared hub (mm serve): the first token to open
// a session in a folder owns it, in the store (store.Backend.ClaimFolders),
// and no other token opens a session there, inside it, or in a folder that
// holds it, since a session's commands see their whole cwd: a folder of
// another's inside it could not be hidden from them (Landlock cannot hide
// a path inside a folder it grants). The folders of serve.sharedFolders,
// and those inside them, are every token's and no token's: a session in
// one claims nothing, yet is refused where it would hold, or lie in,
// another token's folder (one owned before it was shared); a folder that
// holds a shared folder is no one's to open. mm -acp's user ("") owns
// every folder, and claims none.

// claimFolders makes the caller's token the owner of the folders a session
// of its is to open in (its cwd, its additional directories: clean,
// existing, inside the roots), as serve.sharedFolders and the record
// allow, before anything of the session starts. It refuses, with invalid
// params naming the folder but never its owner, a folder another token
// owns, lies in, or holds, and a folder that holds a shared one.
func (c *Caller) claimFolders(folders ...string) error {
	if !c.shared || c.owner == "" || len(folders) == 0 {
		return nil
	}
	var claim, check []string
	real := map[string]string{}
	for _, f := range folders {
		r := tools.RealPath(f)
		real[r] = f
		switch {
		case c.hub.inShared(r):
			check = append(check, r)
		case c.hub.holdsShared(r):
			return acp.NewInvalidParams(map[string]any{"cwd": f, "error": fmt.Sprintf(
				"%q holds a folder of serve.sharedFolders, which no token may own: open the session in the shared folder, or beside it", f)})
		default:
			claim = append(claim, r)
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, ownersTimeout)
	defer cancel()
	err := c.hub.store.ClaimFolders(ctx, c.owner, claim, check)
	var taken *store.FolderTakenError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &taken):
		f := real[taken.Folder]
		return acp.NewInvalidParams(map[string]any{"cwd": f, "error": fmt.Sprintf(
			"%q is another token's folder, lies in one, or holds one: folders have owners on this server, and a session opens only in its token's", f)})
	default:
		c.log.Error(fmt.Sprintf("[acp] the folders' owners: %v", err))
		return jsonrpc.Internal(fmt.Sprintf("mm cannot tell whose folder this is now, so no session opens here: %v", err), nil)
	}
}

// ownersTimeout bounds a look at the record of the folders' owners.
const ownersTimeout = 30 * time.Second

// inShared says whether folder (links followed) is a shared folder or lies
// in one (serve.sharedFolders).
func (h *Hub) inShared(folder string) bool {
	for _, s := range h.sharedFolders {
		if tools.Inside(folder, s) {
			return true
		}
	}
	return false
}

// holdsShared says whether folder (links followed) holds a shared folder.
func (h *Hub) holdsShared(folder string) bool {
	for _, s := range h.sharedFolders {
		if tools.Inside(s, folder) {
			return true
		}
	}
	return false
}

// othersFolders lists the folders recorded as owned by another token than
// owner: hidden from owner's commands and file tools. It waits for the
// store (a file, a query), off any actor.
func (h *Hub) othersFolders(owner string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ownersTimeout)
	defer cancel()
	return h.store.FoldersNotOf(ctx, owner)
}
