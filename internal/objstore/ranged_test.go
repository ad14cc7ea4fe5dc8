package objstore_test

import (
	"bytes"
	"context"
	"errors"
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
	r, err := objstore.OpenRange(ctx, c, "data", "f.parquet")
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != 10000 {
		t.Fatalf("size %d", r.Size())
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
	if r.Bytes() != 150 {
		t.Fatalf("counted %d bytes, want 150", r.Bytes())
	}
	if _, err := objstore.OpenRange(ctx, c, "data", "nothing.parquet"); err == nil {
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
