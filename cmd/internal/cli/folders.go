package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// checkFolders checks, as mm serve starts, what its folders' owners rest
// on (docs/sandbox.md#folders-have-owners): every shared folder is under
// the roots, and the store's record of the owners can be read (a corrupt
// file stops the server, left as it is). It warns of a shared folder that
// lies in, or holds, a folder a token owned before it was shared (only
// that token opens sessions there), and of a record kept in memory only.
func checkFolders(log *slog.Logger, cfg *configs.Config, roots []string, st store.Backend) error {
	for i, f := range cfg.Serve.SharedFolders {
		real, in := tools.RealPath(f), false
		for _, r := range roots {
			in = in || tools.Inside(real, tools.RealPath(r))
		}
		if !in {
			return fmt.Errorf("%w: serve.sharedFolders[%d]: %q is outside the folders this server serves (serve.roots: %s)", configs.ErrConfig, i, f, strings.Join(roots, ", "))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.CheckOwners(ctx); err != nil {
		return err
	}
	if cfg.Store.URL == "" && store.StateDir() == "" {
		log.Warn("serve: no state folder ($XDG_STATE_HOME, or a home): the folders' owners are kept in memory, and a restart forgets them")
	}
	if len(cfg.Serve.SharedFolders) == 0 {
		return nil
	}
	log.Info("serve: shared folders (anyone's, no one's) " + strings.Join(cfg.Serve.SharedFolders, ", "))
	owned, err := st.FoldersNotOf(ctx, "")
	if err != nil {
		return err
	}
	for _, f := range cfg.Serve.SharedFolders {
		real := tools.RealPath(f)
		for _, o := range owned {
			if tools.Inside(real, o) || tools.Inside(o, real) {
				log.Warn(fmt.Sprintf("serve: the shared folder %s lies in, or holds, %s, which a token owned before it was shared: only that token opens sessions there", f, o))
			}
		}
	}
	return nil
}
