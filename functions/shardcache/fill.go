package shardcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// lockPrefix names a fill's lock file in the cache directory. It has
	// no entrySuffix, so nothing takes it for an entry.
	lockPrefix = ".lock-"
	// fillPoll is how often a read waiting on another process's fill
	// tries its lock: the lock is advisory (flock), and a blocking flock
	// would not end with ctx.
	fillPoll = 15 * time.Millisecond
)

// DefaultFillWait is Config.FillWait's default. A fill streams at its
// reader's pace; a shard (100 MB - 1 GB) normally passes in a few seconds,
// so a fill still going after 30 s has a stalled consumer, and one more S3
// read of the shard costs less than a task held behind it.
const DefaultFillWait = 30 * time.Second

// waitStep is the wait policy of a read behind another's fill: having
// waited for waited, it sleeps for sleep before looking again (at most
// poll, never past bound), or gives up and reads S3 when the bound is
// reached.
func waitStep(waited, bound, poll time.Duration) (sleep time.Duration, giveUp bool) {
	if waited >= bound {
		return 0, true
	}
	return min(poll, bound-waited), false
}

// fillOutcome is how a wait behind another read's fill ended: the label
// of sluice_cache_fill_waits_total.
type fillOutcome string

const (
	fillHit       fillOutcome = "hit"       // the fill committed: served from the cache
	fillFallback  fillOutcome = "fallback"  // it did not: read from S3 as on a miss
	fillTimeout   fillOutcome = "timeout"   // waited Config.FillWait: read from S3, not cached
	fillCancelled fillOutcome = "cancelled" // the read's ctx ended first
)

// fills is who fills which entry: one read per entry name at a time in
// this process (a map), and across the processes sharing the directory
// (a lock file per name, flock(2): the kernel drops it when its holder
// dies, so a killed replica never blocks the others).
type fills struct {
	dir string // "": this process only

	mu      sync.Mutex
	m       map[string]chan struct{} // closed when the fill of name ends
	waiting int                      // reads waiting for a fill now
	err     func(error)              // a lock file that cannot be used, reported
}

// waits counts a read waiting (+1) and done waiting (-1).
func (f *fills) waits(d int) {
	f.mu.Lock()
	f.waiting += d
	f.mu.Unlock()
}

// waitingNow is how many reads wait for a fill.
func (f *fills) waitingNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

// fill is a held fill of one entry name; release it once the entry is
// committed or abandoned.
type fill struct {
	fs   *fills
	name string
	done chan struct{}
	lock *os.File // nil: this process only
}

// acquire makes the caller name's filler, or says whom to wait for: wake
// is closed when this process's filler ends; nil wake with nil fill means
// another process fills it (poll).
func (f *fills) acquire(name string) (held *fill, wake <-chan struct{}) {
	f.mu.Lock()
	if ch, ok := f.m[name]; ok {
		f.mu.Unlock()
		return nil, ch
	}
	done := make(chan struct{})
	f.m[name] = done
	f.mu.Unlock()
	h := &fill{fs: f, name: name, done: done}
	if f.dir == "" {
		return h, nil
	}
	lock, err := lockFile(f.lockPath(name))
	switch {
	case errors.Is(err, errLocked):
		h.release() // the in-process waiters poll too
		return nil, nil
	case err != nil:
		// Fill anyway: a directory that cannot hold a lock file fails
		// the entry's write too, and that degrades to S3.
		if f.err != nil {
			f.err(err)
		}
	}
	h.lock = lock
	return h, nil
}

func (f *fills) lockPath(name string) string {
	return filepath.Join(f.dir, lockPrefix+strings.TrimSuffix(name, entrySuffix))
}

// release ends the fill: the entry is committed or abandoned by now.
// Releasing again does nothing.
func (h *fill) release() {
	if h == nil || h.done == nil {
		return
	}
	if h.lock != nil {
		// Removed while held, so that a later filler creates a new one
		// (lockFile tells an unlinked lock file apart).
		os.Remove(h.lock.Name())
		h.lock.Close()
		h.lock = nil
	}
	h.fs.mu.Lock()
	delete(h.fs.m, h.name)
	h.fs.mu.Unlock()
	close(h.done)
	h.done = nil
}

var errLocked = errors.New("locked by another process")

// lockFile opens path and takes its lock without blocking; errLocked when
// another process holds it. A holder removes the file before unlocking, so
// a lock taken on a file no longer at path is no lock: it tries again.
func lockFile(path string) (*os.File, error) {
	for range 3 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening fill lock: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, errLocked
			}
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if sameFile(f, path) {
			return f, nil
		}
		f.Close() // its holder removed it meanwhile
	}
	return nil, errLocked // files come and go: someone else is at it
}

// sameFile says whether the open f is still the file at path.
func sameFile(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	pi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, pi)
}

// removeLockIfFree removes the lock file at path when no process holds
// it: one left behind by a killed filler.
func removeLockIfFree(path string) bool {
	f, err := lockFile(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return os.Remove(path) == nil
}
