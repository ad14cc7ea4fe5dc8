package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// RangeReader reads parts of one S3 object, each ReadAt a ranged GET: for
// formats read by their index (Parquet's footer, then the column chunks
// wanted) rather than start to end. Every GET names the object's ETag as
// it was when opened, so an object replaced while being read fails the
// read (412) rather than mixing two versions.
type RangeReader struct {
	ctx    context.Context
	c      *s3.Client
	bucket string
	key    string
	size   int64
	etag   string
	bytes  atomic.Int64
}

// OpenRange looks the object up (a HEAD) for its size and ETag.
func OpenRange(ctx context.Context, c *s3.Client, bucket, key string) (*RangeReader, error) {
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return nil, err
	}
	if h.ContentLength == nil || *h.ContentLength < 0 {
		return nil, fmt.Errorf("s3://%s/%s: no content length", bucket, key)
	}
	return &RangeReader{ctx: ctx, c: c, bucket: bucket, key: key, size: *h.ContentLength, etag: aws.ToString(h.ETag)}, nil
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
