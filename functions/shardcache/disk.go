package shardcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const (
	entrySuffix = ".shard"
	tempPrefix  = ".tmp-"
	// staleTemp is how long a temporary file may go unwritten before it
	// counts as left behind by a killed writer and is removed. A live
	// writer writes at least every read of the S3 body.
	staleTemp = 10 * time.Minute
)

// entryName is the file name of an object's entry: a hash, so any key fits
// and two replicas name the same object alike.
func entryName(bucket, key string) string {
	sum := sha256.Sum256([]byte(bucket + "\x00" + key))
	return hex.EncodeToString(sum[:20]) + entrySuffix
}

// tempFile is where an entry is written before it is renamed into place;
// *os.File is one. A seam for tests of a full disk.
type tempFile interface {
	io.Writer
	Name() string
	Close() error
}

// diskTier is a directory of entry files, possibly shared with other
// replicas, within a byte budget for the whole directory.
type diskTier struct {
	dir    string
	budget int64
	// createTemp opens a new temporary file in dir (os.CreateTemp).
	createTemp func(dir, pattern string) (tempFile, error)

	mu      sync.Mutex
	reuse   reuseClock
	reading map[string]int // entries this process is serving: not evicted
}

// newDiskTier creates dir if needed and proves it writable, and removes
// temporary files that killed writers left behind.
func newDiskTier(dir string, budget int64, fallback time.Duration, now time.Time) (*diskTier, int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("creating cache dir: %w", err)
	}
	probe, err := os.CreateTemp(dir, tempPrefix+"probe-*")
	if err != nil {
		return nil, 0, fmt.Errorf("writing in cache dir: %w", err)
	}
	_, werr := probe.Write([]byte("probe"))
	probe.Close()
	os.Remove(probe.Name())
	if werr != nil {
		return nil, 0, fmt.Errorf("writing in cache dir: %w", werr)
	}
	d := &diskTier{dir: dir, budget: budget, reuse: reuseClock{fallback: fallback}, reading: map[string]int{},
		createTemp: func(dir, pattern string) (tempFile, error) { return os.CreateTemp(dir, pattern) }}
	removed := d.removeStaleTemps(now)
	return d, removed, nil
}

func (d *diskTier) path(name string) string { return filepath.Join(d.dir, name) }

// removeStaleTemps deletes temporary files not written for staleTemp, and
// the lock files of fills that killed replicas left (a lock file is
// removed when its fill ends; one older than staleTemp that no process
// holds is a leftover).
func (d *diskTier) removeStaleTemps(now time.Time) int {
	des, err := os.ReadDir(d.dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, de := range des {
		isTemp, isLock := strings.HasPrefix(de.Name(), tempPrefix), strings.HasPrefix(de.Name(), lockPrefix)
		if !isTemp && !isLock {
			continue
		}
		fi, err := de.Info()
		if err != nil || now.Sub(fi.ModTime()) <= staleTemp {
			continue
		}
		if isLock && removeLockIfFree(d.path(de.Name())) || isTemp && os.Remove(d.path(de.Name())) == nil {
			n++
		}
	}
	return n
}

// open opens name's entry and reads its header; fs.ErrNotExist when there
// is none. A corrupt entry is removed and reported as ErrCorruptEntry.
func (d *diskTier) open(name string) (*os.File, entryInfo, time.Time, error) {
	f, err := os.Open(d.path(name))
	if err != nil {
		return nil, entryInfo{}, time.Time{}, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, entryInfo{}, time.Time{}, err
	}
	info, err := readEntryInfo(f)
	if err != nil {
		f.Close()
		if errors.Is(err, ErrCorruptEntry) {
			d.remove(name)
		}
		return nil, entryInfo{}, time.Time{}, err
	}
	return f, info, st.ModTime(), nil
}

// pin keeps name from being evicted by this process until the returned
// func is called. Another replica sharing the directory may still remove
// it; the open file stays readable.
func (d *diskTier) pin(name string) (unpin func()) {
	d.mu.Lock()
	d.reading[name]++
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.reading[name]--; d.reading[name] <= 0 {
			delete(d.reading, name)
		}
	}
}

// touch records a hit: the entry's modification time is its last use,
// which every replica sharing the directory sees.
func (d *diskTier) touch(name string, lastUse, now time.Time) {
	d.mu.Lock()
	d.reuse.hit(lastUse, now)
	d.mu.Unlock()
	_ = os.Chtimes(d.path(name), now, now)
}

func (d *diskTier) remove(name string) { _ = os.Remove(d.path(name)) }

// admit makes room for need bytes if the policy allows, evicting cold
// entries; it returns how many it evicted.
func (d *diskTier) admit(need int64, now time.Time) (ok bool, evicted int, err error) {
	des, err := os.ReadDir(d.dir)
	if err != nil {
		return false, 0, fmt.Errorf("listing cache dir: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	entries := make([]Entry, 0, len(des))
	var staleLocks []string
	for _, de := range des {
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue // removed meanwhile, or not ours
		}
		n := de.Name()
		switch {
		case strings.HasPrefix(n, lockPrefix):
			// Not an entry. A fill's lock file goes when the fill ends;
			// an old one is a killed filler's leftover.
			if now.Sub(fi.ModTime()) > staleTemp {
				staleLocks = append(staleLocks, n)
			}
		case strings.HasPrefix(n, tempPrefix):
			entries = append(entries, Entry{Name: n, Size: fi.Size(), LastUse: fi.ModTime(), Pinned: true})
		case strings.HasSuffix(n, entrySuffix):
			entries = append(entries, Entry{Name: n, Size: fi.Size(), LastUse: fi.ModTime(), Pinned: d.reading[n] > 0})
		}
	}
	for _, n := range staleLocks {
		removeLockIfFree(d.path(n))
	}
	evict, ok := Admit(entries, need, d.budget, now, d.reuse.horizon())
	for _, n := range evict {
		if err := os.Remove(d.path(n)); err == nil || errors.Is(err, fs.ErrNotExist) {
			evicted++
		}
	}
	return ok, evicted, nil
}

// entryWriter writes one entry to a temporary file and renames it into
// place once every byte arrived.
type entryWriter struct {
	d       *diskTier
	name    string
	f       tempFile
	size    int64
	written int64
	crc     hash.Hash32
	err     error // the first write error; the entry is then abandoned
}

func (d *diskTier) begin(name, etag string, size int64) (*entryWriter, error) {
	if len(etag) > maxETagLen {
		return nil, fmt.Errorf("etag of %d bytes", len(etag))
	}
	f, err := d.createTemp(d.dir, tempPrefix+name+"-*")
	if err != nil {
		return nil, fmt.Errorf("creating cache entry: %w", err)
	}
	w := &entryWriter{d: d, name: name, f: f, size: size, crc: crc32.New(castagnoli)}
	if _, err := f.Write(entryHeader(etag, size)); err != nil {
		w.abort()
		return nil, fmt.Errorf("writing cache entry: %w", err)
	}
	return w, nil
}

// write copies p into the entry; after an error it does nothing and
// returns that error again.
func (w *entryWriter) write(p []byte) error {
	if w.err != nil {
		return w.err
	}
	if _, err := w.f.Write(p); err != nil {
		w.err = fmt.Errorf("writing cache entry: %w", err)
		return w.err
	}
	w.crc.Write(p)
	w.written += int64(len(p))
	return nil
}

// commit renames the entry into place if it is whole, else abandons it.
func (w *entryWriter) commit() error {
	if w.err == nil && w.written != w.size {
		w.err = fmt.Errorf("cache entry: %d of %d bytes arrived", w.written, w.size)
	}
	if w.err == nil {
		var tr [trailerSize]byte
		binary.BigEndian.PutUint32(tr[:], w.crc.Sum32())
		if _, err := w.f.Write(tr[:]); err != nil {
			w.err = fmt.Errorf("writing cache entry: %w", err)
		}
	}
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = fmt.Errorf("closing cache entry: %w", err)
	}
	if w.err == nil {
		if err := os.Rename(w.f.Name(), w.d.path(w.name)); err != nil {
			w.err = fmt.Errorf("renaming cache entry: %w", err)
		}
	}
	if w.err != nil {
		os.Remove(w.f.Name())
	}
	return w.err
}

// abort removes the temporary file.
func (w *entryWriter) abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}
