package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/testenv"
)

func TestRangeReader(t *testing.T) {
	ctx := context.Background()
	c, _ := testenv.S3(t, "data")
	data := make([]byte, 10000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	put := func(body []byte) {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: ptr("data"), Key: ptr("f.parquet"), Body: bytes.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	put(data)
	r, err := objstore.OpenRange(ctx, c, "data", "f.parquet", 16)
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != 10000 || r.Bytes() != 16 {
		t.Fatalf("size %d, %d bytes read: want 10000 and the tail's 16", r.Size(), r.Bytes())
	}
	p := make([]byte, 100)
	if n, err := r.ReadAt(p, 1234); n != 100 || err != nil || !bytes.Equal(p, data[1234:1334]) {
		t.Fatalf("ReadAt 1234: %d, %v", n, err)
	}
	// Past the end: what there is, and io.EOF.
	if n, err := r.ReadAt(p, 9950); n != 50 || !errors.Is(err, io.EOF) || !bytes.Equal(p[:50], data[9950:]) {
		t.Fatalf("ReadAt 9950: %d, %v", n, err)
	}
	if n, err := r.ReadAt(p, 10000); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("ReadAt at the end: %d, %v", n, err)
	}
	if r.Bytes() != 16+100+50 {
		t.Fatalf("counted %d bytes, want 166: the tail's 16, then 100 and 50", r.Bytes())
	}
	// Within the tail: served from memory.
	if n, err := r.ReadAt(p[:10], 9990); n != 10 || err != nil || !bytes.Equal(p[:10], data[9990:]) || r.Bytes() != 166 {
		t.Fatalf("ReadAt in the tail: %d, %v, %d bytes counted", n, err, r.Bytes())
	}
	// A small object, and an empty one, read as the rest.
	for _, size := range []int{5, 0} {
		key := fmt.Sprintf("small-%d", size)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: ptr("data"), Key: &key, Body: bytes.NewReader(data[:size])}); err != nil {
			t.Fatal(err)
		}
		r, err := objstore.OpenRange(ctx, c, "data", key, 16)
		if err != nil || r.Size() != int64(size) {
			t.Fatalf("%s: %v, size %d, %d bytes read", key, err, r.Size(), r.Bytes())
		}
		if n, err := r.ReadAt(p, 0); n != size || !errors.Is(err, io.EOF) || !bytes.Equal(p[:n], data[:size]) {
			t.Fatalf("%s: ReadAt %d, %v", key, n, err)
		}
	}
	if _, err := objstore.OpenRange(ctx, c, "data", "nothing.parquet", 16); err == nil {
		t.Fatal("opened a missing object")
	}
	// The object replaced: a read of the old version's ranges fails
	// rather than mixing the two.
	put(bytes.Repeat([]byte("x"), 10000))
	if _, err := r.ReadAt(p, 0); err == nil || !strings.Contains(err.Error(), "f.parquet at 0+100") {
		t.Fatalf("ReadAt after the object changed: %v, want an error", err)
	}
}

func ptr[T any](v T) *T { return &v }
