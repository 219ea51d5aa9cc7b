package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaLock is the key of the transaction-level advisory lock that
// migrate holds: two mm starting at once against an empty database take
// turns, and the second finds the tables made. (CREATE TABLE IF NOT EXISTS
// alone is not enough: two at once can both decide to create, and one
// fails on the catalog's unique index.)
const schemaLock int64 = 0x6d6d5f73746f7265 // "mm_store"

// migrations[v] brings the schema from version v-1 to v; the database
// records the version it is at in mm_schema. A released migration is never
// edited: a change is a new one appended.
var migrations = [][]string{
	1: {
		// One row per session: the document as mm encoded it (doc, the
		// exact bytes of a session file, signature included), the header
		// fields session/list shows, and version, which every save counts
		// up and is fenced on. holder names the writer (one activation of
		// the session) that saved it last.
		`CREATE TABLE mm_sessions (
			id      text PRIMARY KEY,
			cwd     text NOT NULL,
			owner   text NOT NULL,
			title   text NOT NULL,
			updated timestamptz NOT NULL,
			format  integer NOT NULL,
			version bigint NOT NULL,
			holder  text NOT NULL,
			doc     bytea NOT NULL
		)`,
		`CREATE INDEX mm_sessions_cwd ON mm_sessions (cwd, updated DESC)`,
		`CREATE INDEX mm_sessions_updated ON mm_sessions (updated DESC)`,
	},
	2: {
		// The folders' owners on a shared server (owners.go): one row
		// per folder claimed, as it is on disk, and the token's name
		// that owns it. Claims take turns on an advisory lock
		// (folderLock), so that two never both succeed.
		`CREATE TABLE mm_folders (
			folder  text PRIMARY KEY,
			owner   text NOT NULL,
			claimed timestamptz NOT NULL DEFAULT now()
		)`,
	},
}

// schemaVersion is the schema version this build makes and reads.
var schemaVersion = len(migrations) - 1

// migrate creates or upgrades the schema in one transaction, under the
// advisory lock; it refuses a database that a newer mm has migrated
// further.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLock); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS mm_schema (version integer NOT NULL)`); err != nil {
		return err
	}
	var at int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM mm_schema`).Scan(&at); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if at > schemaVersion {
		return fmt.Errorf("the database's mm schema is at version %d, this mm knows up to %d: upgrade mm", at, schemaVersion)
	}
	if at == schemaVersion {
		return tx.Commit(ctx)
	}
	for v := at + 1; v <= schemaVersion; v++ {
		for _, stmt := range migrations[v] {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("schema version %d: %w", v, err)
			}
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM mm_schema`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO mm_schema (version) VALUES ($1)`, schemaVersion); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
