package lines

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/sluice-project/sluice/format/wds"
)

// DefaultMaxLineBytes bounds one line, so a shard without newlines cannot
// make a reader allocate without limit.
const DefaultMaxLineBytes = 16 << 20

// Reader yields one sample per non-empty line.
type Reader struct {
	br      *bufio.Reader
	prefix  string // "<shard base>/"
	ext     string
	maxLine int
	line    int // number of the next line, 0-based
	done    bool
}

// NewReader reads lines from r. shardKey names the shard (only its base
// name, less the extension, goes into keys); each sample has the line,
// without its "\n" or "\r\n", as its only member, under ext ("jsonl",
// "tsv"). maxLine <= 0 means DefaultMaxLineBytes.
func NewReader(r io.Reader, shardKey, ext string, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	base := path.Base(shardKey)
	base = strings.TrimSuffix(base, path.Ext(base))
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), prefix: base + "/", ext: ext, maxLine: maxLine}
}

// Key is the sample key of line n (0-based) of the shard.
func (r *Reader) Key(n int) string { return fmt.Sprintf("%s%08d", r.prefix, n) }

// Next returns the next line's sample, io.EOF at the end, or a
// *wds.SampleError for a line over the size limit (the line is skipped and
// reading goes on). Any other error is the underlying reader's, wrapped.
func (r *Reader) Next() (wds.Sample, error) {
	for {
		if r.done {
			return wds.Sample{}, io.EOF
		}
		n := r.line
		data, size, err := r.readLine()
		if err != nil && !errors.Is(err, io.EOF) {
			r.done = true
			return wds.Sample{}, fmt.Errorf("reading line %d: %w", n+1, err)
		}
		if errors.Is(err, io.EOF) {
			r.done = true
			if size == 0 {
				return wds.Sample{}, io.EOF // no final partial line
			}
		}
		r.line++
		if size > r.maxLine {
			return wds.Sample{}, &wds.SampleError{Key: r.Key(n), Reason: fmt.Sprintf("line %d is %d bytes, over the %d-byte limit", n+1, size, r.maxLine)}
		}
		if len(data) == 0 {
			continue
		}
		return wds.Sample{Key: r.Key(n), Files: map[string][]byte{r.ext: data}}, nil
	}
}

// readLine reads one line and returns a copy of it without the line
// ending, and its size without the ending. A line over maxLine is consumed
// but not kept (data is nil). err is io.EOF when the stream ended on this
// line (size 0: there was no line left).
func (r *Reader) readLine() (data []byte, size int, err error) {
	var buf []byte
	var prev, last byte // the line's last two bytes, for its ending
	for {
		frag, ferr := r.br.ReadSlice('\n')
		for _, c := range frag[max(len(frag)-2, 0):] {
			prev, last = last, c
		}
		size += len(frag)
		if size <= r.maxLine+2 { // the ending may take 2 bytes beyond the limit
			buf = append(buf, frag...)
		} else {
			buf = nil
		}
		if !errors.Is(ferr, bufio.ErrBufferFull) {
			err = ferr
			break
		}
	}
	if size > 0 && last == '\n' {
		size--
		if size > 0 && prev == '\r' {
			size--
		}
	}
	if size > r.maxLine {
		return nil, size, err
	}
	return buf[:size], size, err
}
