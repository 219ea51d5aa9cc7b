package store

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// KeyFile is the name of the signing key in the user's state directory.
const KeyFile = "session.key"

// A session file's signature is its last field, written by Sign right
// before the closing brace: `,"mac":"<64 hex digits>"}`. It is the
// HMAC-SHA256, under the user's key, of macContext followed by the file
// without that field (the exact bytes Marshal wrote). Readers that do not
// know it ignore it, as they ignore any unknown field.
const (
	macPrefix  = `,"mac":"`
	macHex     = 2 * sha256.Size
	macSuffix  = `"}`
	macLen     = len(macPrefix) + macHex + len(macSuffix)
	macContext = "mm session file\n"
)

// Key signs the session files this user's mm writes, so that a file it did
// not write (shipped in a repository, copied from another user or machine,
// edited by hand, or saved by an mm from before signatures) is told apart
// and loaded without the settings that would let commands run unasked.
//
// The key is 32 random bytes, hex-encoded, in <state dir>/session.key,
// mode 0600, made on first use: processes that make it at the same time
// agree on one (the first to link its file in place wins; the others read
// it). A nil *Key, or one that could not be read or made, signs nothing
// and verifies nothing: every file is then unsigned. Its methods are safe
// for concurrent use.
type Key struct {
	path string
	warn func(string)
	once sync.Once
	key  []byte // nil when there is none to use
}

// OpenKey returns the key kept in stateDir, read or made on first use;
// warn (nil: silent) hears, in one line, why it cannot be used. An empty
// stateDir gives nil: no key.
func OpenKey(stateDir string, warn func(string)) *Key {
	if stateDir == "" {
		return nil
	}
	return &Key{path: filepath.Join(stateDir, KeyFile), warn: warn}
}

// Load reads or makes the key now, if that was not done yet, and reports
// whether there is one to use. The first Marshal or check does it
// otherwise; mm calls Load when it starts serving with sessions on, so
// that the first save does not wait for the key's file.
func (k *Key) Load() bool { return k.bytes() != nil }

// bytes returns the key, reading or making it the first time; nil when
// there is none.
func (k *Key) bytes() []byte {
	if k == nil {
		return nil
	}
	k.once.Do(func() {
		key, err := loadKey(k.path)
		if err != nil {
			if k.warn != nil {
				k.warn(fmt.Sprintf("session files are neither signed nor trusted: %v", err))
			}
			return
		}
		k.key = key
	})
	return k.key
}

// loadKey reads the key at path, making it when there is none.
func loadKey(path string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		key, err := readKey(path)
		if errors.Is(err, errShortKey) && attempt < 5 {
			// Another process made it with the fallback below and is
			// still writing it.
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt > 0 {
			return key, err
		}
		if err := makeKey(path); err != nil {
			return nil, err
		}
	}
}

var errShortKey = errors.New("not a key mm made")

func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(string(bytes.TrimSpace(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("%s: %w", path, errShortKey)
	}
	if runtime.GOOS != "windows" {
		// Whoever can read the key can forge the files it signs.
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%s can be read by other users (mode %v); make it 0600", path, fi.Mode().Perm())
		}
	}
	return key, nil
}

// makeKey writes a new key at path unless one is there: complete in a
// temporary file first, then linked in place, which fails if another
// process linked its own first. Where links are not supported it creates
// path exclusively and writes it, and a reader that comes in between
// retries (readKey's errShortKey).
func makeKey(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	text := []byte(hex.EncodeToString(key) + "\n")
	tmp, err := os.CreateTemp(dir, "."+KeyFile+".tmp-*") // mode 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(text)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	err = os.Link(tmp.Name(), path)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.Write(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (k *Key) mac(key []byte) hash.Hash {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(macContext))
	return h
}

// Marshal is store.Marshal followed by the signature, when there is a key
// (a nil Key marshals unsigned).
func (k *Key) Marshal(f *File) ([]byte, error) {
	data, err := marshal(f, macLen)
	if err != nil {
		return nil, err
	}
	key := k.bytes()
	if key == nil {
		return data, nil
	}
	h := k.mac(key)
	h.Write(data)
	sum := h.Sum(nil)
	// data has room for the field: marshal grew its buffer by macLen.
	data = append(data[:len(data)-1], macPrefix...)
	data = hex.AppendEncode(data, sum)
	return append(data, macSuffix...), nil
}

// verify reports whether the size bytes of r end with a signature of the
// rest made with this key.
func (k *Key) verify(r io.ReaderAt, size int64) bool {
	key := k.bytes()
	if key == nil || size < int64(macLen)+2 {
		return false
	}
	var tail [macLen]byte
	if _, err := r.ReadAt(tail[:], size-int64(macLen)); err != nil {
		return false
	}
	if string(tail[:len(macPrefix)]) != macPrefix || string(tail[macLen-len(macSuffix):]) != macSuffix {
		return false
	}
	h := k.mac(key)
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size-int64(macLen))); err != nil {
		return false
	}
	h.Write([]byte{'}'})
	// Compared as the hex Marshal writes, so that every byte of a signed
	// file is what the key vouches for (upper-case hex is not).
	return hmac.Equal(hex.AppendEncode(nil, h.Sum(nil)), tail[len(macPrefix):len(macPrefix)+macHex])
}
