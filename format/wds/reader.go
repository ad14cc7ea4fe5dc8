package wds

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"strings"
)

// Sample is one record of a shard: its key and its members by extension
// ("jpg", "cls", "txt"...).
type Sample struct {
	Key   string
	Files map[string][]byte
}

// Defaults of Limits. A shard comes from outside, and its headers say how
// big its members are: without these a few KB of tar could make a reader
// allocate without limit.
const (
	// DefaultMaxMemberBytes bounds one member.
	DefaultMaxMemberBytes = 64 << 20
	// DefaultMaxSampleBytes bounds the members of one sample together:
	// two members at the member cap (an image and its metadata fit with
	// room to spare).
	DefaultMaxSampleBytes = 2 * DefaultMaxMemberBytes
	// DefaultMaxSampleMembers bounds how many members one sample has; a
	// WebDataset sample has a handful (jpg, cls, json, txt).
	DefaultMaxSampleMembers = 64
)

// Limits bound what one sample of a shard may take; a zero field takes
// its default. A sample over any of them fails alone: the reader reports
// it and goes on with the next.
type Limits struct {
	// MaxMemberBytes caps one member (DefaultMaxMemberBytes).
	MaxMemberBytes int64
	// MaxSampleBytes caps one sample's members together (DefaultMaxSampleBytes).
	MaxSampleBytes int64
	// MaxSampleMembers caps one sample's member count (DefaultMaxSampleMembers).
	MaxSampleMembers int
}

func (l Limits) withDefaults() Limits {
	if l.MaxMemberBytes <= 0 {
		l.MaxMemberBytes = DefaultMaxMemberBytes
	}
	if l.MaxSampleBytes <= 0 {
		l.MaxSampleBytes = DefaultMaxSampleBytes
	}
	if l.MaxSampleMembers <= 0 {
		l.MaxSampleMembers = DefaultMaxSampleMembers
	}
	return l
}

// SampleError is a sample that could not be read. Key is "" only when the
// tar stream broke before any member name could be read.
type SampleError struct {
	Key    string
	Reason string
}

func (e *SampleError) Error() string { return fmt.Sprintf("sample %q: %s", e.Key, e.Reason) }

// SplitKey splits a member name into sample key and extension, the
// WebDataset way: the extension starts at the first dot of the base name.
func SplitKey(name string) (key, ext string) {
	dir, base := path.Split(name)
	i := strings.IndexByte(base, '.')
	if i < 0 {
		return name, ""
	}
	return dir + base[:i], base[i+1:]
}

// Reader yields samples from a tar stream.
type Reader struct {
	tr     *tar.Reader
	limits Limits
	cur    *Sample
	// curBytes and curMembers are what cur's members add up to so far.
	curBytes   int64
	curMembers int
	curErr     string // why cur failed, if it did
	ready      []result
	done       bool
}

type result struct {
	s   Sample
	err error
}

// NewReader reads tar from r with the default Limits but for maxMember
// (<= 0 means DefaultMaxMemberBytes).
func NewReader(r io.Reader, maxMember int64) *Reader {
	return NewLimitedReader(r, Limits{MaxMemberBytes: maxMember})
}

// NewLimitedReader reads tar from r, each sample within l.
func NewLimitedReader(r io.Reader, l Limits) *Reader {
	return &Reader{tr: tar.NewReader(r), limits: l.withDefaults()}
}

// Next returns the next sample, io.EOF at the end, or a *SampleError for a
// sample that cannot be read; the caller reports it and calls Next again.
// A sample over a limit, or with a sparse member, fails alone (its other
// members are skipped unread). A broken stream (truncated member, bad
// header) fails the sample being read, and then Next returns io.EOF:
// nothing after the break can be located.
func (r *Reader) Next() (Sample, error) {
	for len(r.ready) == 0 {
		if r.done {
			return Sample{}, io.EOF
		}
		r.step()
	}
	res := r.ready[0]
	r.ready = r.ready[1:]
	return res.s, res.err
}

// step reads one member and queues whatever samples it completes.
func (r *Reader) step() {
	h, err := r.tr.Next()
	if err == io.EOF {
		r.flush()
		r.done = true
		return
	}
	if err != nil {
		r.breakOff(r.curKey(), "reading tar header: "+err.Error())
		return
	}
	sparse := isSparse(h)
	if h.Typeflag != tar.TypeReg && !sparse {
		return
	}
	key, ext := SplitKey(h.Name)
	if r.cur != nil && key != r.cur.Key {
		r.flush()
	}
	if r.cur == nil {
		r.cur = &Sample{Key: key, Files: map[string][]byte{}}
	}
	if r.curErr != "" {
		return // failed already: its other members are skipped unread
	}
	r.curMembers++
	switch l := r.limits; {
	case sparse:
		// Its header may claim gigabytes that take a few bytes of tar:
		// no WebDataset writer makes one.
		r.fail(fmt.Sprintf("member %s is a sparse file (GNU sparse header): a corrupt sample", h.Name))
	case r.curMembers > l.MaxSampleMembers:
		r.fail(fmt.Sprintf("more than %d members, over the per-sample cap", l.MaxSampleMembers))
	case h.Size > l.MaxMemberBytes:
		r.fail(fmt.Sprintf("member %s is %d bytes, over the %d-byte cap", h.Name, h.Size, l.MaxMemberBytes))
	case r.curBytes+h.Size > l.MaxSampleBytes:
		r.fail(fmt.Sprintf("members add up to %d bytes with %s, over the %d-byte per-sample cap",
			r.curBytes+h.Size, h.Name, l.MaxSampleBytes))
	}
	if r.curErr != "" {
		return // tar.Reader skips the unread body on the next Next
	}
	data := make([]byte, h.Size)
	if _, err := io.ReadFull(r.tr, data); err != nil {
		r.breakOff(key, fmt.Sprintf("member %s truncated: %v", h.Name, err))
		return
	}
	r.cur.Files[ext] = data
	r.curBytes += h.Size
}

// isSparse reports a GNU sparse member: the old GNU type 'S', or the PAX
// GNU.sparse.* records (which archive/tar presents as a regular file of
// the expanded size).
func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// fail marks the sample being read as failed and drops what it holds.
func (r *Reader) fail(reason string) {
	r.curErr = reason
	r.cur.Files = nil
}

func (r *Reader) curKey() string {
	if r.cur == nil {
		return ""
	}
	return r.cur.Key
}

// flush queues the sample being read.
func (r *Reader) flush() {
	if r.cur == nil {
		return
	}
	if r.curErr != "" {
		r.ready = append(r.ready, result{err: &SampleError{Key: r.cur.Key, Reason: r.curErr}})
	} else {
		r.ready = append(r.ready, result{s: *r.cur})
	}
	r.cur, r.curErr, r.curBytes, r.curMembers = nil, "", 0, 0
}

// breakOff ends reading: the sample being read (key) fails with reason.
func (r *Reader) breakOff(key, reason string) {
	if r.cur != nil && r.cur.Key != key {
		r.flush()
	}
	r.cur, r.curErr, r.curBytes, r.curMembers = nil, "", 0, 0
	r.ready = append(r.ready, result{err: &SampleError{Key: key, Reason: reason}})
	r.done = true
}
