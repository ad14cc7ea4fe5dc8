package shardcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
)

// An entry file is a header, the object's bytes and a trailer:
//
//	magic "SLCACHE1" | etag length uint16 | etag | size uint64 | bytes | crc32c uint32
//
// The header lets a reader check the ETag before serving, the size tells a
// truncated file apart from a whole one, and the CRC catches damage.
const (
	entryMagic  = "SLCACHE1"
	maxETagLen  = 1024
	trailerSize = 4
)

// ErrCorruptEntry means an entry file failed its checks; it is removed.
var ErrCorruptEntry = errors.New("corrupt cache entry")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func entryHeader(etag string, size int64) []byte {
	h := make([]byte, 0, len(entryMagic)+2+len(etag)+8)
	h = append(h, entryMagic...)
	h = binary.BigEndian.AppendUint16(h, uint16(len(etag)))
	h = append(h, etag...)
	return binary.BigEndian.AppendUint64(h, uint64(size))
}

// entryInfo is an entry file's header, read without its body.
type entryInfo struct {
	etag      string
	size      int64
	headerLen int64
	crc       uint32
}

// readEntryInfo reads f's header and trailer and checks that the file
// holds exactly the size the header says.
func readEntryInfo(f *os.File) (entryInfo, error) {
	st, err := f.Stat()
	if err != nil {
		return entryInfo{}, fmt.Errorf("stat: %w", err)
	}
	head := make([]byte, len(entryMagic)+2)
	if _, err := io.ReadFull(f, head); err != nil {
		return entryInfo{}, fmt.Errorf("%w: header: %w", ErrCorruptEntry, err)
	}
	if !bytes.Equal(head[:len(entryMagic)], []byte(entryMagic)) {
		return entryInfo{}, fmt.Errorf("%w: bad magic", ErrCorruptEntry)
	}
	n := int(binary.BigEndian.Uint16(head[len(entryMagic):]))
	if n > maxETagLen {
		return entryInfo{}, fmt.Errorf("%w: etag of %d bytes", ErrCorruptEntry, n)
	}
	rest := make([]byte, n+8)
	if _, err := io.ReadFull(f, rest); err != nil {
		return entryInfo{}, fmt.Errorf("%w: header: %w", ErrCorruptEntry, err)
	}
	info := entryInfo{etag: string(rest[:n]), size: int64(binary.BigEndian.Uint64(rest[n:])),
		headerLen: int64(len(head) + len(rest))}
	if info.size < 0 || st.Size() != info.headerLen+info.size+trailerSize {
		return entryInfo{}, fmt.Errorf("%w: %d bytes on disk for a %d-byte object", ErrCorruptEntry, st.Size(), info.size)
	}
	var tr [trailerSize]byte
	if _, err := f.ReadAt(tr[:], info.headerLen+info.size); err != nil {
		return entryInfo{}, fmt.Errorf("%w: trailer: %w", ErrCorruptEntry, err)
	}
	info.crc = binary.BigEndian.Uint32(tr[:])
	return info, nil
}

// checkedReader serves size bytes from r and checks their CRC at the end:
// a mismatch turns io.EOF into an ErrCorruptEntry.
type checkedReader struct {
	r      io.Reader
	want   uint32
	crc    hash.Hash32
	left   int64
	failed func() // called once on a mismatch
}

func newCheckedReader(r io.Reader, size int64, want uint32, failed func()) *checkedReader {
	return &checkedReader{r: io.LimitReader(r, size), want: want, crc: crc32.New(castagnoli), left: size, failed: failed}
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc.Write(p[:n])
	c.left -= int64(n)
	if err == io.EOF {
		if c.left != 0 {
			return n, fmt.Errorf("%w: %d bytes short", ErrCorruptEntry, c.left)
		}
		if got := c.crc.Sum32(); got != c.want {
			if c.failed != nil {
				c.failed()
				c.failed = nil
			}
			return n, fmt.Errorf("%w: crc %08x, want %08x", ErrCorruptEntry, got, c.want)
		}
	}
	return n, err
}
