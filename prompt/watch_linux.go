package prompt

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watch tells a session whether the folders its instructions were looked
// for in have changed since, without a stat: the kernel says (inotify).
// Each folder watched has a generation that any change of its entries
// moves on (a file made, removed, renamed, written or touched); a
// session's look is the generations it saw, and the next turn looks again
// only when one moved. The kernel's queue of events is read when a
// session asks (SameSince), under the Watch's lock, so that a change made
// before the question is always in the answer. A folder the kernel
// cannot watch (a network file system, whose changes made elsewhere the
// kernel never hears of; the watches' limit reached) is not watched, and
// a session with one looks again every turn, as without a Watch.
type Watch struct {
	fd int

	mu    sync.Mutex
	buf   []byte
	byWD  map[int32]*watched
	byDir map[string]*watched
	looks map[string]*seen // by key: a session's last look
	// all moves on when the kernel dropped events (its queue overflowed):
	// any folder may have changed.
	all uint64
	// drains counts the reads of the kernel's queue begun (drain), each
	// under mu: a question asked when it read n is answered by any drain
	// that began after, which read every event queued before the
	// question. Turns that start together then share one read.
	drains atomic.Uint64
}

type watched struct {
	wd   int32
	dirs []string // the paths byDir keeps it under (a link is another)
	refs int
	gen  uint64
	dead bool // the kernel removed the watch (the folder went)
}

// watchMask: a folder's entries changing, and the folder itself going.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR

// NewWatch starts a Watch; nil, with the reason, where inotify cannot be
// had (then every turn looks again).
func NewWatch() (*Watch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &Watch{fd: fd, buf: make([]byte, 16*1024), byWD: map[int32]*watched{},
		byDir: map[string]*watched{}, looks: map[string]*seen{}}, nil
}

// Close stops the Watch.
func (w *Watch) Close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 {
		_ = unix.Close(w.fd)
		w.fd = -1
		w.all++
	}
}

// drain reads the kernel's queue until it is empty and moves on the
// generations of the folders its events name. w.mu is held.
func (w *Watch) drain() {
	w.drains.Add(1)
	for w.fd >= 0 {
		n, err := unix.Read(w.fd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			if err != unix.EAGAIN {
				w.all++ // events may be lost: every folder counts as changed
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				w.all++
				continue
			}
			x := w.byWD[ev.Wd]
			if x == nil {
				continue
			}
			x.gen++
			if ev.Mask&unix.IN_IGNORED != 0 {
				x.dead = true
				delete(w.byWD, ev.Wd)
				w.unname(x)
			}
		}
	}
}

// networkFS are the file systems whose changes made on another machine
// the kernel does not hear of.
var networkFS = map[int64]bool{
	0x6969: true, 0x517b: true, 0xff534d42: true, 0xfe534d42: true, // NFS, SMB, CIFS, SMB2
	0x65735546: true, 0x01021997: true, 0x00c36400: true, 0x5346414f: true, // FUSE, 9P, Ceph, AFS
	0x47504653: true, 0x013111a8: true, 0x0bd00bd0: true, // GPFS, IBRIX, Lustre
}

// seen is what a look saw: the generations of the folders it looked in,
// each held until the look is dropped.
type seen struct {
	all  uint64
	held []*watched
	gens []uint64
}

// Look holds a watch on each of dirs (a folder that does not exist is
// watched in its nearest parent that does) for key (a session), in place
// of what key held before, and notes what they are now; false when one
// cannot be watched (key then holds nothing). It is to be called before
// the folders are read, so that a change made while they are read moves
// a generation on.
func (w *Watch) Look(key string, dirs []string) bool {
	if w == nil {
		return false
	}
	w.Drop(key)
	there := make([]string, len(dirs))
	for i, dir := range dirs {
		there[i] = existing(dir)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drain()
	s := &seen{all: w.all}
	for _, dir := range there {
		x, ok := w.hold(dir)
		if !ok {
			w.release(s)
			return false
		}
		s.held = append(s.held, x)
		s.gens = append(s.gens, x.gen)
	}
	w.looks[key] = s
	return true
}

// existing is dir, or its nearest parent that exists.
func existing(dir string) string {
	for {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// hold holds a watch on dir. w.mu is held.
func (w *Watch) hold(dir string) (*watched, bool) {
	if w.fd < 0 {
		return nil, false
	}
	if x := w.byDir[dir]; x != nil && !x.dead {
		x.refs++
		return x, true
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || networkFS[int64(st.Type)] {
		return nil, false
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, watchMask)
	if err != nil {
		return nil, false
	}
	if x := w.byWD[int32(wd)]; x != nil && !x.dead {
		// The same folder by another path (a link): one watch.
		x.refs++
		w.byDir[dir] = x
		x.dirs = append(x.dirs, dir)
		return x, true
	}
	x := &watched{wd: int32(wd), dirs: []string{dir}, refs: 1}
	w.byWD[x.wd], w.byDir[dir] = x, x
	return x, true
}

// Ticket is what a question asked now hands SameSince: taken when a
// prompt reaches mm, it lets any read of the kernel's queue begun since
// answer for it, however long the prompt waits for its turn.
func (w *Watch) Ticket() uint64 {
	if w == nil {
		return 0
	}
	return w.drains.Load()
}

// SameSince says whether nothing changed in the folders key looked in
// since its look (false when it holds none), for a question asked when
// Ticket said asked: a read of the kernel's queue begun since (by any
// session) has every event queued before the question, and none is made
// again; one is made when none began.
func (w *Watch) SameSince(key string, asked uint64) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.looks[key]
	if s == nil {
		return false
	}
	if w.drains.Load() == asked {
		// No read of the queue began since the question: one now. (One
		// that began after it, since or while this one waited for the
		// lock, has read everything queued before the question.)
		w.drain()
	}
	if w.all != s.all {
		return false
	}
	for i, x := range s.held {
		if x.dead || x.gen != s.gens[i] {
			return false
		}
	}
	return true
}

// Drop lets go of what key looked at; a watch no look holds is removed.
func (w *Watch) Drop(key string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.release(w.looks[key])
	delete(w.looks, key)
}

// release lets go of a look's watches. w.mu is held.
func (w *Watch) release(s *seen) {
	if s == nil {
		return
	}
	for _, x := range s.held {
		x.refs--
		if x.refs > 0 || x.dead || w.fd < 0 {
			continue
		}
		_, _ = unix.InotifyRmWatch(w.fd, uint32(x.wd))
		delete(w.byWD, x.wd)
		w.unname(x)
	}
	s.held = nil
}

// unname forgets the paths x is known by, those not taken since by
// another watch. w.mu is held.
func (w *Watch) unname(x *watched) {
	for _, dir := range x.dirs {
		if w.byDir[dir] == x {
			delete(w.byDir, dir)
		}
	}
}

// Watched is how many folders are watched.
func (w *Watch) Watched() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byWD)
}
