package parquet

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	pq "github.com/parquet-go/parquet-go"

	"github.com/sluice-project/sluice/format/wds"
)

// DefaultColumns is the mapping of sample members to columns used when a
// job names none: Hugging Face datasets' usual names. With it a file needs
// one of these columns, and those it has are read.
var DefaultColumns = map[string]string{"txt": "text", "jpg": "image", "cls": "label"}

// Defaults of Limits.
const (
	DefaultMaxFooterBytes   = 8 << 20
	DefaultMaxFooterMemory  = 128 << 20
	DefaultMaxRowGroupRows  = 1 << 22
	DefaultMaxRowGroupBytes = 512 << 20
	DefaultMaxPageBytes     = 64 << 20
	// MaxColumns bounds the columns a reader maps.
	MaxColumns = 16
)

// Limits bound what a file may make a reader hold; a zero field takes its
// default.
type Limits struct {
	// MaxFooterBytes caps the footer (the file's metadata) as stored.
	MaxFooterBytes int64
	// MaxFooterMemory caps what the footer's lists take once decoded.
	MaxFooterMemory int64
	// MaxRowGroupRows caps one row group's rows.
	MaxRowGroupRows int64
	// MaxRowGroupBytes caps the read columns' chunks of one row group
	// together, as stored (compressed): what a reader holds at once.
	MaxRowGroupBytes int64
	// MaxPageBytes caps one page uncompressed.
	MaxPageBytes int64
}

func (l Limits) withDefaults() Limits {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxFooterBytes, DefaultMaxFooterBytes)
	def(&l.MaxFooterMemory, DefaultMaxFooterMemory)
	def(&l.MaxRowGroupRows, DefaultMaxRowGroupRows)
	def(&l.MaxRowGroupBytes, DefaultMaxRowGroupBytes)
	def(&l.MaxPageBytes, DefaultMaxPageBytes)
	return l
}

// column is one column read, and the member it becomes.
type column struct {
	member string
	path   string // as named: "image"
	leaf   *pq.Column
	kind   pq.Kind
}

// Reader yields one sample per row of a Parquet file.
type Reader struct {
	r      io.ReaderAt
	size   int64
	name   string // the file's key, for messages
	prefix string // "<base>/"
	limits Limits
	file   *pq.File
	cols   []column
	check  pageChecker

	group   int   // the row group being read, or the next one
	row     int64 // the next row's number in the file
	rows    int64 // rows of the group being read
	inGroup int64 // rows of it read so far
	curs    []*cursor
	done    bool
	// pending is the next row group being read ahead, if one is.
	pending chan fetched
}

// Open reads the footer of the file r holds (size bytes, named name: its
// key) and picks its columns. cols maps members to column paths, a nested
// column's parts joined by "." ("image.bytes"); every one must be in the
// file. nil takes DefaultColumns, those the file has. A column that is a
// group with a "bytes" leaf (a Hugging Face image) is read as that leaf.
// A corrupt footer or a missing column is a *wds.SampleError keyed with
// the file's base name; an error of r is returned wrapped as it is.
func Open(r io.ReaderAt, size int64, name string, cols map[string]string, l Limits) (*Reader, error) {
	base := path.Base(name)
	base = strings.TrimSuffix(base, path.Ext(base))
	rd := &Reader{r: r, size: size, name: name, prefix: base + "/", limits: l.withDefaults()}
	rd.check.limits = rd.limits
	tail, err := rd.readFooter()
	if err != nil {
		return nil, err
	}
	err = safely(func() error {
		rd.file, err = pq.OpenFile(tail, size, pq.SkipMagicBytes(true), pq.SkipPageIndex(true), pq.SkipBloomFilters(true))
		return err
	})
	if err != nil {
		return nil, rd.corrupt(base, "reading its footer: %v", err)
	}
	// The schema's types come from the file too: the library panics on
	// some (Kind of a MAP leaf).
	if err := safely(func() error { return rd.pickColumns(cols) }); err != nil {
		return nil, rd.corrupt(base, "%v", err)
	}
	return rd, nil
}

// corrupt is a sample error about the file.
func (r *Reader) corrupt(key, format string, args ...any) error {
	return &wds.SampleError{Key: key, Reason: fmt.Sprintf("parquet file %s: ", r.name) + fmt.Sprintf(format, args...)}
}

// Key is the sample key of row n (0-based) of the file.
func (r *Reader) Key(n int64) string { return fmt.Sprintf("%s%08d", r.prefix, n) }

// tailReader serves bytes the reader read: the footer, to the library
// opening the file (which then reads nothing else: page indexes, bloom
// filters and the leading magic are skipped), and a column chunk, to its
// pages' decoder.
type tailReader struct {
	off  int64
	data []byte
}

func (t *tailReader) ReadAt(p []byte, off int64) (int, error) {
	if off < t.off || off-t.off > int64(len(t.data)) {
		return 0, fmt.Errorf("read at %d outside the bytes read (%d..%d)", off, t.off, t.off+int64(len(t.data)))
	}
	n := copy(p, t.data[off-t.off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// TailBytes is what Open reads of the file's end first: most footers
// fit, taking one request. An io.ReaderAt that has read them already (as
// objstore.RangeReader does when opened) saves that request.
const TailBytes = 16 << 10

// readFooter reads the file's footer (length and magic last) and checks
// it before the library decodes it.
func (r *Reader) readFooter() (*tailReader, error) {
	base := strings.TrimSuffix(r.prefix, "/")
	if r.size < 12 {
		return nil, r.corrupt(base, "%d bytes: too short for Parquet", r.size)
	}
	n := min(r.size, TailBytes)
	tail := &tailReader{off: r.size - n, data: make([]byte, n)}
	if _, err := readFull(r.r, tail.data, tail.off); err != nil {
		return nil, fmt.Errorf("reading the footer of %s: %w", r.name, err)
	}
	end := tail.data[len(tail.data)-8:]
	if string(end[4:]) != "PAR1" {
		if string(end[4:]) == "PARE" {
			return nil, r.corrupt(base, "encrypted: not supported")
		}
		return nil, r.corrupt(base, "does not end in PAR1 (%q): not a Parquet file, or truncated", end[4:])
	}
	footer := int64(binary.LittleEndian.Uint32(end[:4]))
	switch {
	case footer > r.limits.MaxFooterBytes:
		return nil, r.corrupt(base, "footer of %d bytes, over the %d-byte limit", footer, r.limits.MaxFooterBytes)
	case footer+12 > r.size:
		return nil, r.corrupt(base, "footer of %d bytes in a file of %d", footer, r.size)
	}
	if footer+8 > n {
		n = footer + 8
		tail = &tailReader{off: r.size - n, data: make([]byte, n)}
		if _, err := readFull(r.r, tail.data, tail.off); err != nil {
			return nil, fmt.Errorf("reading the footer of %s: %w", r.name, err)
		}
	}
	meta := tail.data[int64(len(tail.data))-8-footer : len(tail.data)-8]
	used, err := checkThrift(meta, r.limits.MaxFooterMemory)
	if err == nil && used != len(meta) {
		err = fmt.Errorf("%d bytes after the metadata", len(meta)-used)
	}
	if err != nil {
		return nil, r.corrupt(base, "footer: %v", err)
	}
	return tail, nil
}

// pickColumns resolves the mapping against the file's schema.
func (r *Reader) pickColumns(cols map[string]string) error {
	optional := cols == nil
	if optional {
		cols = DefaultColumns
	}
	if len(cols) > MaxColumns {
		return fmt.Errorf("%d columns mapped: at most %d", len(cols), MaxColumns)
	}
	root := r.file.Root()
	for _, member := range slices.Sorted(maps.Keys(cols)) {
		p := cols[member]
		c := root
		for part := range strings.SplitSeq(p, ".") {
			if c = c.Column(part); c == nil {
				break
			}
		}
		if c == nil {
			if optional {
				continue
			}
			return fmt.Errorf("no column %q (for member %s): the file has %s", p, member, describe(root))
		}
		if !c.Leaf() {
			if b := c.Column("bytes"); b != nil && b.Leaf() {
				c = b // a Hugging Face image: {bytes, path}
			} else {
				return fmt.Errorf("column %q (for member %s) is a group of %s: name one of its leaves", p, member, describe(c))
			}
		}
		if c.MaxRepetitionLevel() > 0 {
			return fmt.Errorf("column %q (for member %s) is a list: not supported", p, member)
		}
		k := c.Type().Kind()
		switch k {
		case pq.ByteArray, pq.FixedLenByteArray, pq.Int32, pq.Int64:
		default:
			return fmt.Errorf("column %q (for member %s) is of type %s: want binary, string or an integer", p, member, k)
		}
		r.cols = append(r.cols, column{member: member, path: p, leaf: c, kind: k})
	}
	if len(r.cols) == 0 {
		return fmt.Errorf("none of the columns %s: the file has %s; name the columns in the job's columns",
			strings.Join(slices.Sorted(maps.Values(cols)), ", "), describe(root))
	}
	return nil
}

func describe(c *pq.Column) string {
	var names []string
	for _, f := range c.Columns() {
		names = append(names, strconv.Quote(f.Name()))
		if len(names) == 20 {
			names = append(names, "...")
			break
		}
	}
	if len(names) == 0 {
		return "no columns"
	}
	return strings.Join(names, ", ")
}

// Next returns the next row's sample, io.EOF at the end, or a
// *wds.SampleError for rows that could not be read: a row group over a
// limit or corrupt fails as one error keyed with its first row, naming
// its rows, and reading goes on with the next row group. Any other error
// is the io.ReaderAt's, wrapped: the rest of the file is not read.
func (r *Reader) Next() (wds.Sample, error) {
	for r.inGroup >= r.rows {
		r.closeGroup()
		if r.done || r.group >= len(r.file.Metadata().RowGroups) {
			r.done = true
			return wds.Sample{}, io.EOF
		}
		if err := r.openGroup(); err != nil {
			return wds.Sample{}, err
		}
	}
	key := r.Key(r.row)
	s := wds.Sample{Key: key, Files: make(map[string][]byte, len(r.cols))}
	for i, c := range r.cols {
		var v pq.Value
		err := safely(func() (err error) {
			v, err = r.curs[i].next()
			return err
		})
		if err != nil {
			return wds.Sample{}, r.failGroup(c, err)
		}
		if v.IsNull() {
			continue
		}
		switch c.kind {
		case pq.Int32:
			s.Files[c.member] = strconv.AppendInt(nil, int64(v.Int32()), 10)
		case pq.Int64:
			s.Files[c.member] = strconv.AppendInt(nil, v.Int64(), 10)
		default:
			s.Files[c.member] = slices.Clone(v.ByteArray())
		}
	}
	r.row++
	r.inGroup++
	return s, nil
}

// failGroup gives up the rest of the current row group.
func (r *Reader) failGroup(c column, err error) error {
	left := r.rows - r.inGroup
	e := r.corrupt(r.Key(r.row), "row group %d, column %s: %v (rows %d..%d not read)",
		r.group-1, c.path, err, r.row, r.row+left-1)
	r.row += left
	r.inGroup = r.rows
	return e
}

// span is one column chunk's place in the file.
type span struct{ off, n int64 }

// plan says where the mapped columns' chunks of row group g are, checking
// them against the file and the limits; a problem is said as a reason.
func (r *Reader) plan(g int) ([]span, string) {
	rg := &r.file.Metadata().RowGroups[g]
	chunks := r.file.RowGroups()[g].ColumnChunks()
	var total int64
	spans := make([]span, len(r.cols))
	for i, c := range r.cols {
		idx := c.leaf.Index()
		if idx < 0 || idx >= len(rg.Columns) || idx >= len(chunks) {
			return nil, fmt.Sprintf("column %s: no chunk", c.path)
		}
		md := &rg.Columns[idx].MetaData
		if rg.Columns[idx].FilePath != "" {
			return nil, fmt.Sprintf("column %s: stored in another file (%q): not supported", c.path, rg.Columns[idx].FilePath)
		}
		start := md.DataPageOffset
		if md.DictionaryPageOffset != 0 {
			start = md.DictionaryPageOffset
		}
		n := md.TotalCompressedSize
		switch {
		case n <= 0 || n > r.limits.MaxRowGroupBytes:
			return nil, fmt.Sprintf("column %s: chunk of %d bytes, over the %d-byte row group limit", c.path, n, r.limits.MaxRowGroupBytes)
		case start < 4 || start > r.size-12 || n > r.size-12-start:
			return nil, fmt.Sprintf("column %s: chunk at %d+%d outside the file's %d bytes", c.path, start, n, r.size)
		}
		total += n
		if total > r.limits.MaxRowGroupBytes {
			return nil, fmt.Sprintf("the read columns' chunks add up to %d bytes or more, over the %d-byte row group limit", total, r.limits.MaxRowGroupBytes)
		}
		spans[i] = span{start, n}
	}
	return spans, ""
}

// fetched is a row group's chunks as read, or why they could not be.
type fetched struct {
	g      int
	data   [][]byte
	reason string // a problem of the file (plan's)
	err    error  // the io.ReaderAt's
}

// fetch reads row group g's chunks of the mapped columns, one ReadAt each.
func (r *Reader) fetch(g int) fetched {
	f := fetched{g: g}
	if r.file.Metadata().RowGroups[g].NumRows == 0 {
		return f
	}
	spans, reason := r.plan(g)
	if reason != "" {
		f.reason = reason
		return f
	}
	f.data = make([][]byte, len(spans))
	for _, run := range coalesce(spans) {
		buf := make([]byte, run.end-run.off)
		if _, err := readFull(r.r, buf, run.off); err != nil {
			f.err = fmt.Errorf("reading row group %d, column %s of %s: %w", g, r.cols[run.cols[0]].path, r.name, err)
			f.data = nil
			return f
		}
		for _, i := range run.cols {
			sp := spans[i]
			f.data[i] = buf[sp.off-run.off : sp.off-run.off+sp.n : sp.off-run.off+sp.n]
		}
	}
	return f
}

// maxGap is how far apart two chunks may be and still be read with one
// request, the bytes between them read and dropped: a request costs more
// than that many bytes (a label column beside an image column is a few
// hundred bytes away, behind the image's path).
const maxGap = 8 << 10

// readRun is a range of the file read with one request, and the chunks
// (by column) in it.
type readRun struct {
	off, end int64
	cols     []int
}

// coalesce groups spans into runs, in file order, each span in one.
func coalesce(spans []span) []readRun {
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(spans[a].off, spans[b].off) })
	var runs []readRun
	for _, i := range order {
		sp := spans[i]
		if n := len(runs); n > 0 && sp.off <= runs[n-1].end+maxGap {
			runs[n-1].end = max(runs[n-1].end, sp.off+sp.n)
			runs[n-1].cols = append(runs[n-1].cols, i)
			continue
		}
		runs = append(runs, readRun{off: sp.off, end: sp.off + sp.n, cols: []int{i}})
	}
	return runs
}

// prefetch starts reading row group g in the background, so that its
// chunks arrive while the group before is processed (a reader holds two
// row groups' chunks at most).
func (r *Reader) prefetch(g int) {
	if g >= len(r.file.Metadata().RowGroups) {
		return
	}
	if rows := r.file.Metadata().RowGroups[g].NumRows; rows < 0 || rows > r.limits.MaxRowGroupRows {
		return // openGroup refuses it unread
	}
	ch := make(chan fetched, 1)
	r.pending = ch
	go func() {
		var f fetched
		if err := safely(func() error { f = r.fetch(g); return nil }); err != nil {
			f = fetched{g: g, reason: err.Error()}
		}
		ch <- f
	}()
}

// openGroup opens the next row group: its chunks of the mapped columns
// (fetched ahead, or read now), each checked and then given to the
// decoder. A group that cannot be read is skipped with its error.
func (r *Reader) openGroup() error {
	g := r.group
	r.group++
	rg := &r.file.Metadata().RowGroups[g]
	rows := rg.NumRows
	key := r.Key(r.row)
	if rows < 0 || rows > r.limits.MaxRowGroupRows {
		// A count that cannot be trusted says nothing about where the
		// next group's rows start: the rest of the file is given up.
		r.done = true
		return r.corrupt(key, "row group %d has %d rows, over the %d-row limit: the rest of the file is not read",
			g, rows, r.limits.MaxRowGroupRows)
	}
	var f fetched
	if r.pending != nil {
		f = <-r.pending
		r.pending = nil
	} else {
		f = r.fetch(g)
	}
	if f.err != nil {
		return f.err
	}
	r.prefetch(g + 1)
	skip := func(format string, args ...any) error {
		e := r.corrupt(key, "row group %d: %s (rows %d..%d not read)", g, fmt.Sprintf(format, args...), r.row, r.row+rows-1)
		r.row += rows
		return e
	}
	if f.reason != "" {
		return skip("%s", f.reason)
	}
	if rows == 0 {
		return nil
	}
	spans, _ := r.plan(g)
	chunks := r.file.RowGroups()[g].ColumnChunks()
	r.curs = make([]*cursor, len(r.cols))
	for i, c := range r.cols {
		data := f.data[i]
		if err := safely(func() error { return r.check.chunk(data, rg.Columns[c.leaf.Index()].MetaData.Codec, rows) }); err != nil {
			r.closeCursors()
			return skip("column %s: %v", c.path, err)
		}
		fc, ok := chunks[c.leaf.Index()].(*pq.FileColumnChunk)
		if !ok {
			r.closeCursors()
			return skip("column %s: not a file column chunk", c.path)
		}
		var pages *pq.FilePages
		if err := safely(func() error {
			pages = fc.PagesFrom(&tailReader{off: spans[i].off, data: data})
			return nil
		}); err != nil {
			r.closeCursors()
			return skip("column %s: %v", c.path, err)
		}
		r.curs[i] = &cursor{pages: pages, buf: make([]pq.Value, 64)}
	}
	r.rows, r.inGroup = rows, 0
	return nil
}

func (r *Reader) closeGroup() {
	r.closeCursors()
	r.rows, r.inGroup = 0, 0
}

func (r *Reader) closeCursors() {
	for _, c := range r.curs {
		if c != nil {
			c.close()
		}
	}
	r.curs = nil
}

// Close releases the pages held, and waits for a read ahead to end (the
// io.ReaderAt's context ending ends it early).
func (r *Reader) Close() {
	r.closeGroup()
	r.check.close()
	if r.pending != nil {
		<-r.pending
		r.pending = nil
	}
}

// cursor reads one column chunk's values in order.
type cursor struct {
	pages  *pq.FilePages
	page   pq.Page
	values pq.ValueReader
	ended  bool // the page's values are all in buf
	buf    []pq.Value
	i, n   int
}

func (c *cursor) next() (pq.Value, error) {
	for c.i >= c.n {
		if c.values == nil || c.ended {
			c.release()
			p, err := c.pages.ReadPage()
			if errors.Is(err, io.EOF) {
				return pq.Value{}, errors.New("fewer values than rows")
			}
			if err != nil {
				return pq.Value{}, err
			}
			c.page, c.values, c.ended = p, p.Values(), false
		}
		n, err := c.values.ReadValues(c.buf)
		c.i, c.n = 0, n
		switch {
		case errors.Is(err, io.EOF):
			c.ended = true
		case err != nil:
			return pq.Value{}, err
		case n == 0:
			return pq.Value{}, errors.New("a page yields no values") // rather than ask forever
		}
	}
	v := c.buf[c.i]
	c.i++
	return v, nil
}

func (c *cursor) release() {
	if c.page != nil {
		pq.Release(c.page)
		c.page, c.values = nil, nil
	}
}

func (c *cursor) close() {
	c.release()
	if c.pages != nil {
		c.pages.Close()
	}
}

// safely runs f, turning a panic of the library into an error: a corrupt
// file must fail its rows, not the replica.
func safely(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("corrupt data (the decoder panicked: %v)", p)
		}
	}()
	return f()
}

// readFull reads len(p) bytes at off.
func readFull(r io.ReaderAt, p []byte, off int64) (int, error) {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return n, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
