package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PGStore is the Backend of store.url: sessions in a PostgreSQL database,
// which every mm that uses it shares, whatever machine it runs on. A
// session is one row of mm_sessions (pgschema.go): the document the file
// store would write, byte for byte, and its header fields as columns for
// session/list. It is found by id alone; list filters by cwd.
//
// Every save is fenced. A Writer starts at the version the session was
// loaded at (File.Rev; 0 for a new session) and each of its saves is an
// UPDATE … WHERE id = $1 AND version = $2 that counts the version up (an
// INSERT … ON CONFLICT DO NOTHING for a new session). A save that matches
// no row means another activation of the session saved or deleted it
// meanwhile: it fails with ErrFenced, and the Writer saves nothing more.
// A save is one statement, so a process killed in the middle leaves the
// old row or the new one, never a torn one.
//
// The database is trusted as the config that names it is: a session read
// from it is Signed (File.Signed), whichever mm, with whichever key, wrote
// it; rows are not files a repository can ship.
type PGStore struct {
	pool     *pgxpool.Pool
	maxBytes int64
	// ctx bounds the writers' saves: Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
}

var _ Backend = (*PGStore)(nil)

// opTimeout bounds one save, load, list or delete: a database that does
// not answer fails the operation rather than holding a session's file
// (and the process's exit) forever.
const opTimeout = 30 * time.Second

// OpenPostgres connects to the database at url (postgres://…, with pgx's
// parameters, e.g. pool_max_conns) and creates or migrates its schema.
// maxBytes is the largest document Load reads (0: DefaultMaxFileBytes).
// Its errors fit on one line and never show the URL's password.
func OpenPostgres(ctx context.Context, url string, maxBytes int64) (*PGStore, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors show the URL with its password hidden.
		return nil, fmt.Errorf("store.url: %s", pgReason(err))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store.url: %s", pgReason(err))
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store.url: %s", pgReason(err))
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store.url: creating or migrating mm's tables: %s", pgReason(err))
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFileBytes
	}
	s := &PGStore{pool: pool, maxBytes: maxBytes}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// where names session id in messages.
func (s *PGStore) where(id string) string { return "session " + id + " in postgres" }

// Load reads session id, wherever it was saved; cwd is not needed.
func (s *PGStore) Load(ctx context.Context, _ string, id string) (*File, string, error) {
	where := s.where(id)
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var rev, size int64
	var doc []byte
	// The document is sent only when it is within the limit, so that a
	// huge one costs the limit's check, not its transfer.
	err := s.pool.QueryRow(ctx, `SELECT version, octet_length(doc), CASE WHEN octet_length(doc) <= $2 THEN doc END
		FROM mm_sessions WHERE id = $1`, id, s.maxBytes).Scan(&rev, &size, &doc)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, where, fmt.Errorf("%w: %s", ErrNotFound, where)
	case err != nil:
		return nil, where, fmt.Errorf("read %s: %s", where, pgReason(err))
	case doc == nil:
		return nil, where, fmt.Errorf("%s: %w: %s (only sessions of at most %s are read)", where, ErrRefused, byteSize(size), byteSize(s.maxBytes))
	}
	f, err := Unmarshal(doc)
	if err == nil && f.ID != id {
		err = fmt.Errorf("%w: the row holds session %q", ErrCorrupt, f.ID)
	}
	if err != nil {
		return nil, where, fmt.Errorf("%s: %w", where, err)
	}
	f.Signed, f.Rev = true, rev
	return f, where, nil
}

// List returns the sessions saved for cwd, from the columns only.
func (s *PGStore) List(ctx context.Context, cwd string) ([]Summary, error) {
	return s.list(ctx, `SELECT id, cwd, title, owner, updated FROM mm_sessions
		WHERE format <= $1 AND cwd = $2 ORDER BY updated DESC, id COLLATE "C" DESC`, Version, cwd)
}

// ListAll returns every session of the database; folders are not needed.
func (s *PGStore) ListAll(ctx context.Context, _ []string) ([]Summary, error) {
	return s.list(ctx, `SELECT id, cwd, title, owner, updated FROM mm_sessions
		WHERE format <= $1 ORDER BY updated DESC, id COLLATE "C" DESC`, Version)
}

// list runs a listing query. Sessions of a newer format are left out, as
// List leaves their files out: this mm could not load them.
func (s *PGStore) list(ctx context.Context, query string, args ...any) ([]Summary, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %s", pgReason(err))
	}
	out := []Summary{}
	var sum Summary
	_, err = pgx.ForEachRow(rows, []any{&sum.ID, &sum.Cwd, &sum.Title, &sum.Owner, &sum.Updated}, func() error {
		out = append(out, sum)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list sessions: %s", pgReason(err))
	}
	return out, nil
}

// Writer starts the fenced writer of session id, at revision rev.
func (s *PGStore) Writer(_, id string, rev int64, onError func(error)) *Writer {
	var token [16]byte
	_, _ = rand.Read(token[:])
	k := &pgSaver{s: s, id: id, rev: rev, holder: hex.EncodeToString(token[:])}
	return startWriter(k.save, k.check, onError)
}

// Create inserts session id, failing with ErrFenced when the id is taken.
func (s *PGStore) Create(ctx context.Context, _ string, id string, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	h, err := docHeader(id, data)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, insertSQL, id, h.cwd, h.owner, h.title, h.updated, h.version, "", data)
	if err != nil {
		return fmt.Errorf("save %s: %s", s.where(id), pgReason(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("save %s: the id is taken: %w", s.where(id), ErrFenced)
	}
	return nil
}

// Delete removes session id wherever it is; folders are not needed.
func (s *PGStore) Delete(ctx context.Context, id string, _ []string, spare func(*File, string, string) bool) (string, error) {
	if spare != nil {
		f, where, err := s.Load(ctx, "", id)
		if err != nil || spare(f, where, f.Cwd) {
			return "", nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	tag, err := s.pool.Exec(ctx, `DELETE FROM mm_sessions WHERE id = $1`, id)
	if err != nil {
		return "", fmt.Errorf("delete %s: %s", s.where(id), pgReason(err))
	}
	if tag.RowsAffected() == 0 {
		return "", nil
	}
	return s.where(id), nil
}

// Folders returns none: Postgres finds a session by id.
func (s *PGStore) Folders() []string { return nil }

// NoteFolder does nothing: ListAll is a query.
func (s *PGStore) NoteFolder(string) {}

// Ping asks the database for a connection that answers.
func (s *PGStore) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres (store.url): %s", pgReason(err))
	}
	return nil
}

// Close ends the saves still running and closes the connections.
func (s *PGStore) Close() {
	s.cancel()
	s.pool.Close()
}

const (
	insertSQL = `INSERT INTO mm_sessions (id, cwd, owner, title, updated, format, version, holder, doc)
		VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8) ON CONFLICT (id) DO NOTHING`
	updateSQL = `UPDATE mm_sessions SET cwd = $3, owner = $4, title = $5, updated = $6, format = $7,
		holder = $8, doc = $9, version = version + 1 WHERE id = $1 AND version = $2`
)

// pgSaver is the write func of one session's Writer: only the Writer's
// goroutine calls save, so its fields need no lock.
type pgSaver struct {
	s  *PGStore
	id string
	// rev is the version the next save expects to find (0: no row yet).
	rev int64
	// holder is this writer's random name, saved with every write, so
	// that a save whose answer was lost can be told from another's.
	holder string
}

// save stores data if the session is still at rev, and counts rev up.
func (k *pgSaver) save(data []byte) error {
	h, err := docHeader(k.id, data)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(k.s.ctx, opTimeout)
	defer cancel()
	for retried := false; ; retried = true {
		ok, err := k.try(ctx, h, data)
		if err != nil {
			return fmt.Errorf("save %s: %s", k.s.where(k.id), pgReason(err))
		}
		if ok {
			k.rev++
			return nil
		}
		// No row at rev. Either another activation saved or deleted the
		// session, or a save of ours went through but its answer was lost
		// (an error after the commit): then the row is ours, one version
		// on, and this save goes on from there.
		var rev int64
		var holder string
		err = k.s.pool.QueryRow(ctx, `SELECT version, holder FROM mm_sessions WHERE id = $1`, k.id).Scan(&rev, &holder)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("save %s: %s", k.s.where(k.id), pgReason(err))
		}
		if retried || err != nil || holder != k.holder || rev != k.rev+1 {
			return fmt.Errorf("save %s: %w", k.s.where(k.id), ErrFenced)
		}
		k.rev = rev
	}
}

// check says whether the row is still the one this writer saved last (or
// still missing, before its first save): nil if so, ErrFenced if another
// activation saved or deleted the session since, the database's error when
// it cannot be asked.
func (k *pgSaver) check() error {
	ctx, cancel := context.WithTimeout(k.s.ctx, opTimeout)
	defer cancel()
	var rev int64
	err := k.s.pool.QueryRow(ctx, `SELECT version FROM mm_sessions WHERE id = $1`, k.id).Scan(&rev)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if k.rev == 0 {
			return nil
		}
		return fmt.Errorf("%s was deleted by another mm: %w", k.s.where(k.id), ErrFenced)
	case err != nil:
		return fmt.Errorf("check %s: %s", k.s.where(k.id), pgReason(err))
	case rev != k.rev:
		return fmt.Errorf("%s is at version %d, this copy at %d: %w", k.s.where(k.id), rev, k.rev, ErrFenced)
	}
	return nil
}

// try runs the fenced INSERT or UPDATE; ok says it matched.
func (k *pgSaver) try(ctx context.Context, h header, data []byte) (bool, error) {
	if k.rev == 0 {
		tag, err := k.s.pool.Exec(ctx, insertSQL, k.id, h.cwd, h.owner, h.title, h.updated, h.version, k.holder, data)
		return err == nil && tag.RowsAffected() == 1, err
	}
	tag, err := k.s.pool.Exec(ctx, updateSQL, k.id, k.rev, h.cwd, h.owner, h.title, h.updated, h.version, k.holder, data)
	return err == nil && tag.RowsAffected() == 1, err
}

// docHeader reads the header of an encoded session for the row's columns;
// it must be session id's.
func docHeader(id string, data []byte) (header, error) {
	h, err := readHeader(json.NewDecoder(bytes.NewReader(data)))
	switch {
	case err != nil:
		return h, fmt.Errorf("save session %s: %w", id, corrupt(jsonReason(err)))
	case !h.hasVersion || h.id != id:
		return h, fmt.Errorf("save session %s: %w", id, corrupt(fmt.Sprintf("the document is session %q's (format %d)", h.id, h.version)))
	}
	return h, nil
}

// pgReason words a pgx error on one line. pgx puts each connection attempt
// on a line of its own, and tries twice (with TLS, then without) when the
// URL does not say: the same reason twice is said once.
func pgReason(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(parts, l) {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// SocketDir is the folder of the unix socket through which url reaches
// its database ("" when it reaches it over TCP, or url does not parse):
// what the commands mm confines must not see.
func SocketDir(url string) string {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil || !strings.HasPrefix(cfg.Host, "/") {
		return ""
	}
	return cfg.Host
}
