package store

import (
	"context"
	"errors"
)

// Backend is where sessions are kept: the file store (FileStore, one file
// per session in its project folder, the default) or a Postgres database
// (PGStore, store.url). The session actor saves through the Writer it
// opens, the ACP edge loads, lists and deletes through the rest, and
// neither knows which backend it talks to. Both keep the same document:
// the bytes Marshal or Key.Marshal encode, signature included.
//
// Its methods are safe for concurrent use. They may wait for the disk or
// the network: an actor calls none of them in its Receive, except Writer,
// which only starts a goroutine.
type Backend interface {
	// Load reads session id. The file store looks for it in cwd's sessions
	// folder only; Postgres finds it by id, whatever folder it was saved
	// in. where names what was read, for messages: a file's path, or
	// "session <id> in postgres". Errors wrap ErrNotFound, ErrRefused,
	// ErrCorrupt or ErrVersion as Reader.Load's do (only a file's
	// ErrNotFound also wraps fs.ErrNotExist), and fit on one line.
	Load(ctx context.Context, cwd, id string) (f *File, where string, err error)
	// List returns the sessions saved for cwd, newest first (see
	// Reader.List).
	List(ctx context.Context, cwd string) ([]Summary, error)
	// ListAll returns every session the backend can find, newest first:
	// in Postgres, every row, in one query; in files, the sessions of the
	// folders of the folder index and of folders (those the caller knows
	// of), since nothing else tells where they are.
	ListAll(ctx context.Context, folders []string) ([]Summary, error)
	// Writer starts the writer of session id in cwd, the only one that
	// saves it while it runs. rev is the File.Rev the session was loaded
	// with (0: a new session). In Postgres every save is fenced on it: a
	// save that finds the session saved or deleted by someone else since
	// fails with ErrFenced, and the writer stops. Files are not fenced.
	Writer(cwd, id string, rev int64, onError func(error)) *Writer
	// Create saves data as session id of cwd, one that no Writer owns
	// (the conversation /new keeps). In Postgres it fails with ErrFenced
	// when the id is taken.
	Create(ctx context.Context, cwd, id string, data []byte) error
	// Delete removes session id: from the first of folders whose sessions
	// folder holds it (files), or wherever it is (Postgres, which needs
	// no folders). spare, when not nil, is asked first with the session
	// and where it was found, and a true answer keeps it (another owner's
	// session); a session that cannot be read is then kept too. It
	// returns where the session was removed from, "" when none was.
	Delete(ctx context.Context, id string, folders []string, spare func(f *File, where, cwd string) bool) (string, error)
	// Folders returns the folders known to hold saved sessions, for a
	// caller that looks for a session by id among folders (Delete): the
	// file store's folder index (Folders.List); none in Postgres, which
	// finds a session by id alone.
	Folders() []string
	// NoteFolder records that cwd holds saved sessions, for ListAll. It
	// is best effort and may write to the disk (files); Postgres needs it
	// not.
	NoteFolder(cwd string)
	// ClaimFolders makes owner (a token's name, never "") the owner of
	// each of claim it does not own yet, once none of claim and check is
	// another owner's folder, lies in one, or holds one: all, or none
	// (ErrFolderTaken). check are only checked (folders no one claims:
	// serve.sharedFolders). The folders are clean, absolute, and as they
	// are on disk. The file store records them in mm's state folder
	// (Owners), Postgres in mm_folders; concurrent claims, of this
	// process or another, never both succeed.
	ClaimFolders(ctx context.Context, owner string, claim, check []string) error
	// FoldersNotOf lists the folders recorded as owned by another than
	// owner: what owner's commands and file tools must not see.
	FoldersNotOf(ctx context.Context, owner string) ([]string, error)
	// CheckOwners reads the record of the folders' owners, for a server
	// that starts: nil, or why it cannot be used (a corrupt file).
	CheckOwners(ctx context.Context) error
	// Ping says whether the backend can take a save now: nil, or why not
	// (the database is unreachable). The file store always can: a folder
	// that cannot be written fails that session's save, not the others'.
	Ping(ctx context.Context) error
	// Close releases what the backend holds (Postgres's connections).
	// Writers must be closed first.
	Close()
}

// ErrFenced means that another activation of a session (a second mm, or a
// second node) saved or deleted it since this one loaded it: this copy is
// stale, and its save was refused so that it cannot overwrite the newer
// one. A Writer that meets it saves nothing more.
var ErrFenced = errors.New("the session was saved or deleted by another mm since this one loaded it")
