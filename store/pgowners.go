package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

// folderLock is the key of the transaction-level advisory lock that a
// claim of folders holds while it checks and records them: claims take
// turns, on every mm that shares the database, and two never both
// succeed.
const folderLock int64 = 0x6d6d5f666f6c6472 // "mm_foldr"

// querier is what pgx's pool and transaction share.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// touching returns the recorded folders that touch folders: each of them,
// the folders that hold one (its parents), and those that lie in one.
func touching(ctx context.Context, q querier, folders []string) ([]FolderOwner, error) {
	var same, prefixes []string
	for _, f := range folders {
		for p := f; ; p = filepath.Dir(p) {
			same = append(same, p)
			if filepath.Dir(p) == p {
				break
			}
		}
		if !strings.HasSuffix(f, string(filepath.Separator)) {
			f += string(filepath.Separator)
		}
		prefixes = append(prefixes, f)
	}
	rows, err := q.Query(ctx, `SELECT folder, owner FROM mm_folders
		WHERE folder = ANY($1) OR EXISTS (SELECT FROM unnest($2::text[]) AS p WHERE starts_with(folder, p))`, same, prefixes)
	if err != nil {
		return nil, err
	}
	var out []FolderOwner
	var r FolderOwner
	_, err = pgx.ForEachRow(rows, []any{&r.Folder, &r.Owner}, func() error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// ClaimFolders checks the folders against mm_folders, and records those
// to claim in one transaction under folderLock when some are not owner's
// yet (a claim that records nothing takes no lock).
func (s *PGStore) ClaimFolders(ctx context.Context, owner string, claim, check []string) error {
	if err := checkFolders(claim, check); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	all := append(append([]string{}, claim...), check...)
	recorded, err := touching(ctx, s.pool, all)
	if err != nil {
		return fmt.Errorf("the folders' owners in postgres: %s", pgReason(err))
	}
	plan, err := planClaims(owner, claim, check, recorded)
	if err != nil || len(plan) == 0 {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("the folders' owners in postgres: %s", pgReason(err))
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, folderLock); err != nil {
		return fmt.Errorf("the folders' owners in postgres: %s", pgReason(err))
	}
	// Again under the lock: another claim may have gone first.
	if recorded, err = touching(ctx, tx, all); err != nil {
		return fmt.Errorf("the folders' owners in postgres: %s", pgReason(err))
	}
	if plan, err = planClaims(owner, claim, check, recorded); err != nil || len(plan) == 0 {
		return err
	}
	for _, f := range plan {
		if _, err := tx.Exec(ctx, `INSERT INTO mm_folders (folder, owner) VALUES ($1, $2)`, f, owner); err != nil {
			return fmt.Errorf("the folders' owners in postgres: %s", pgReason(err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("the folders' owners in postgres: %s", pgReason(err))
	}
	return nil
}

// FoldersNotOf lists, sorted, the folders of mm_folders whose owner is
// not owner.
func (s *PGStore) FoldersNotOf(ctx context.Context, owner string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT folder FROM mm_folders WHERE owner <> $1 ORDER BY folder COLLATE "C"`, owner)
	if err != nil {
		return nil, fmt.Errorf("the folders' owners in postgres: %s", pgReason(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("the folders' owners in postgres: %s", pgReason(err))
	}
	return out, nil
}

// CheckOwners has nothing to check: the table was made or migrated when
// the store opened.
func (s *PGStore) CheckOwners(context.Context) error { return nil }
