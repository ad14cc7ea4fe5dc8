package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// RangeReader reads parts of one S3 object, each ReadAt a ranged GET: for
// formats read by their index (Parquet's footer, then the column chunks
// wanted) rather than start to end. Every GET names the object's ETag as
// it was when opened, so an object replaced while being read fails the
// read (412) rather than mixing two versions. The object's tail, read
// when it is opened, is served from memory.
type RangeReader struct {
	ctx    context.Context
	c      *s3.Client
	bucket string
	key    string
	size   int64
	etag   string
	bytes  atomic.Int64
	tail   []byte // the object's last bytes
}

// OpenRange reads the object's last tail bytes (all of a smaller one),
// which also says its size and ETag: one GET where a HEAD and a read of
// the index at the end would take two.
func OpenRange(ctx context.Context, c *s3.Client, bucket, key string, tail int64) (*RangeReader, error) {
	r := &RangeReader{ctx: ctx, c: c, bucket: bucket, key: key}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key, Range: aws.String(fmt.Sprintf("bytes=-%d", max(tail, 1)))})
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "InvalidRange" {
		// An empty object has no last byte to ask for, and some servers
		// (gofakes3) refuse a suffix longer than the object, which S3
		// answers with all of it: its size, and no tail.
		h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
		if err != nil {
			return nil, err
		}
		r.size, r.etag = aws.ToInt64(h.ContentLength), aws.ToString(h.ETag)
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	r.etag = aws.ToString(out.ETag)
	n := aws.ToInt64(out.ContentLength)
	r.size = n
	if cr := aws.ToString(out.ContentRange); cr != "" {
		var first, last int64
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &first, &last, &r.size); err != nil || last-first+1 != n || last != r.size-1 {
			return nil, fmt.Errorf("s3://%s/%s: content range %q for %d bytes", bucket, key, cr, n)
		}
	}
	if n < 0 || n > max(tail, 1) {
		return nil, fmt.Errorf("s3://%s/%s: %d bytes for the last %d", bucket, key, n, tail)
	}
	r.tail = make([]byte, n)
	got, err := io.ReadFull(out.Body, r.tail)
	r.bytes.Add(int64(got))
	if err != nil {
		return nil, fmt.Errorf("reading the end of s3://%s/%s: %w", bucket, key, err)
	}
	return r, nil
}

// Size is the object's size when opened.
func (r *RangeReader) Size() int64 { return r.size }

// Bytes is what the reads have received so far.
func (r *RangeReader) Bytes() int64 { return r.bytes.Load() }

// ReadAt reads len(p) bytes at off with one GET (the context is
// OpenRange's). A range past the end is read up to it, with io.EOF.
func (r *RangeReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), r.size-off)
	if want == 0 {
		return 0, nil
	}
	if t := r.size - int64(len(r.tail)); off >= t {
		copy(p, r.tail[off-t:off-t+want])
		if want < int64(len(p)) {
			return int(want), io.EOF
		}
		return int(want), nil
	}
	in := &s3.GetObjectInput{Bucket: &r.bucket, Key: &r.key, Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+want-1))}
	if r.etag != "" {
		in.IfMatch = &r.etag
	}
	out, err := r.c.GetObject(r.ctx, in)
	if err != nil {
		return 0, fmt.Errorf("reading s3://%s/%s at %d+%d: %w", r.bucket, r.key, off, want, Explain(err))
	}
	defer out.Body.Close()
	if got := aws.ToString(out.ETag); r.etag != "" && got != "" && got != r.etag {
		// A server that ignores If-Match (gofakes3 does) still says which
		// version it sent.
		return 0, fmt.Errorf("reading s3://%s/%s at %d+%d: the object changed while read (ETag %s, was %s)", r.bucket, r.key, off, want, got, r.etag)
	}
	n, err := io.ReadFull(out.Body, p[:want])
	r.bytes.Add(int64(n))
	if err != nil {
		return n, fmt.Errorf("reading s3://%s/%s at %d+%d: %w", r.bucket, r.key, off, want, err)
	}
	if want < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}
