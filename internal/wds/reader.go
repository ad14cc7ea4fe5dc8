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

// DefaultMaxMemberBytes bounds one member, so a corrupt or hostile header
// cannot make a reader allocate without limit.
const DefaultMaxMemberBytes = 64 << 20

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
	tr        *tar.Reader
	maxMember int64
	cur       *Sample
	curErr    string // why cur failed, if it did
	ready     []result
	done      bool
}

type result struct {
	s   Sample
	err error
}

// NewReader reads tar from r; maxMember <= 0 means DefaultMaxMemberBytes.
func NewReader(r io.Reader, maxMember int64) *Reader {
	if maxMember <= 0 {
		maxMember = DefaultMaxMemberBytes
	}
	return &Reader{tr: tar.NewReader(r), maxMember: maxMember}
}

// Next returns the next sample, io.EOF at the end, or a *SampleError for a
// sample that cannot be read; the caller reports it and calls Next again.
// A member over the size cap fails its own sample only. A broken stream
// (truncated member, bad header) fails the sample being read, and then Next
// returns io.EOF: nothing after the break can be located.
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
	if h.Typeflag != tar.TypeReg {
		return
	}
	key, ext := SplitKey(h.Name)
	if r.cur != nil && key != r.cur.Key {
		r.flush()
	}
	if r.cur == nil {
		r.cur = &Sample{Key: key, Files: map[string][]byte{}}
	}
	if h.Size > r.maxMember {
		r.curErr = fmt.Sprintf("member %s is %d bytes, over the %d-byte cap", h.Name, h.Size, r.maxMember)
		return // tar.Reader skips the unread body on the next Next
	}
	data := make([]byte, h.Size)
	if _, err := io.ReadFull(r.tr, data); err != nil {
		r.breakOff(key, fmt.Sprintf("member %s truncated: %v", h.Name, err))
		return
	}
	r.cur.Files[ext] = data
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
	r.cur, r.curErr = nil, ""
}

// breakOff ends reading: the sample being read (key) fails with reason.
func (r *Reader) breakOff(key, reason string) {
	if r.cur != nil && r.cur.Key != key {
		r.flush()
	}
	r.cur = nil
	r.curErr = ""
	r.ready = append(r.ready, result{err: &SampleError{Key: key, Reason: reason}})
	r.done = true
}
