package parquet

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// TestDecompressionBombsAreRefused: a page that decompresses to more than
// the page limit is refused by what it decompresses to, whatever its
// header says: the decoders grow their output as far as the data goes.
func TestDecompressionBombsAreRefused(t *testing.T) {
	zeros := make([]byte, 8<<20)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(zeros)
	zw.Close()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	bombs := map[format.CompressionCodec][]byte{
		format.Snappy: snappy.Encode(nil, zeros),
		format.Gzip:   gz.Bytes(),
		format.Zstd:   enc.EncodeAll(zeros, nil),
	}
	pc := &pageChecker{limits: Limits{MaxPageBytes: 1 << 20}.withDefaults()}
	defer pc.close()
	for codec, b := range bombs {
		if len(b) > 1<<20 {
			t.Fatalf("%s: %d bytes compressed, not a bomb", codec, len(b))
		}
		err := pc.decompressed(codec, b)
		if err == nil || !strings.Contains(err.Error(), "over the 1048576-byte page limit") {
			t.Errorf("%s: %d bytes to 8 MiB: %v, want refused", codec, len(b), err)
		}
		if err := pc.decompressed(codec, b[:len(b)/2]); err == nil {
			t.Errorf("%s: half a stream: no error", codec)
		}
	}
	small := snappy.Encode(nil, zeros[:1000])
	if err := pc.decompressed(format.Snappy, small); err != nil {
		t.Errorf("a page within the limit: %v", err)
	}
}
