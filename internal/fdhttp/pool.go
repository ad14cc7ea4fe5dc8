package fdhttp

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// pool is one connection's reusable body buffers (wire.AgentSocketHead's
// Buffer): which exist, which the client views, which went to it. Only
// bookkeeping: the files are made by the caller.
type pool struct {
	bufs     map[uint32]*buffer
	next     uint32
	bytes    int64
	maxBufs  int
	maxBytes int64
}

type buffer struct {
	id     uint32
	size   int64
	f      *os.File
	lent   bool // a body in it is being made, or the client views it
	passed bool // its file went to the client with an answer
}

func newPool(maxBufs int, maxBytes int64) *pool {
	return &pool{bufs: map[uint32]*buffer{}, maxBufs: maxBufs, maxBytes: maxBytes}
}

// free lends the smallest buffer not lent of at least n bytes; nil if none.
func (p *pool) free(n int64) *buffer {
	var best *buffer
	for _, b := range p.bufs {
		if !b.lent && b.size >= n && (best == nil || b.size < best.size || b.size == best.size && b.id < best.id) {
			best = b
		}
	}
	if best != nil {
		best.lent = true
	}
	return best
}

// room says whether a new buffer of n bytes fits the bounds.
func (p *pool) room(n int64) bool {
	return len(p.bufs) < p.maxBufs && p.bytes+n <= p.maxBytes
}

// add keeps f, of size bytes, as a new buffer, lent.
func (p *pool) add(size int64, f *os.File) *buffer {
	p.next++
	b := &buffer{id: p.next, size: size, f: f, lent: true}
	p.bufs[b.id] = b
	p.bytes += size
	return b
}

// release takes back the buffers the client named; every one must be
// lent to it, or none is taken.
func (p *pool) release(ids []uint32) error {
	for i, id := range ids {
		b := p.bufs[id]
		switch {
		case b == nil:
			return fmt.Errorf("buffer %d: this connection has no such buffer", id)
		case !b.lent || !b.passed:
			return fmt.Errorf("buffer %d: not lent to the client", id)
		case slices.Contains(ids[:i], id):
			return fmt.Errorf("buffer %d: released twice", id)
		}
	}
	for _, id := range ids {
		p.bufs[id].lent = false
	}
	return nil
}

// close closes every buffer's file: the client's mappings keep theirs.
func (p *pool) close() {
	for _, b := range p.bufs {
		if b.f != nil {
			b.f.Close()
		}
	}
	clear(p.bufs)
	p.bytes = 0
}

// parseRelease reads a wire.AgentSocketHeaderRelease value.
func parseRelease(v string, max int) ([]uint32, error) {
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > max {
		return nil, fmt.Errorf("%d buffers released: a connection has at most %d", len(parts), max)
	}
	ids := make([]uint32, len(parts))
	for i, s := range parts {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("buffer %q: want a buffer number", s)
		}
		ids[i] = uint32(n)
	}
	return ids, nil
}
