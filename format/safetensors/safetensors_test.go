package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	img := Tensor{Name: "image", DType: U8, Shape: []int{2, 2, 2, 3}, Data: bytes.Repeat([]byte{7}, 24)}
	lbl := Tensor{Name: "label", DType: I64, Shape: []int{2}, Data: make([]byte, 16)}
	binary.LittleEndian.PutUint64(lbl.Data[8:], 42)
	b, err := Encode([]Tensor{img, lbl}, map[string]string{"job": "j1"})
	if err != nil {
		t.Fatal(err)
	}
	if hl := binary.LittleEndian.Uint64(b); (8+hl)%8 != 0 {
		t.Fatalf("data not 8-byte aligned: header %d", hl)
	}
	f, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["job"] != "j1" {
		t.Fatalf("metadata = %v", f.Metadata)
	}
	got := f.Tensors["label"]
	if binary.LittleEndian.Uint64(got.Data[8:]) != 42 || got.Shape[0] != 2 {
		t.Fatalf("label = %+v", got)
	}
	if !bytes.Equal(f.Tensors["image"].Data, img.Data) {
		t.Fatal("image bytes differ")
	}
}

func TestEncodeRejectsShapeMismatch(t *testing.T) {
	_, err := Encode([]Tensor{{Name: "x", DType: F32, Shape: []int{3}, Data: make([]byte, 8)}}, nil)
	if err == nil {
		t.Fatal("want error for 8 bytes under F32[3]")
	}
}

func TestDecodeCorrupt(t *testing.T) {
	good, _ := Encode([]Tensor{{Name: "x", DType: U8, Shape: []int{4}, Data: []byte{1, 2, 3, 4}}}, nil)
	for name, b := range map[string][]byte{
		"short":     {1, 2},
		"huge len":  append([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, good[8:]...),
		"truncated": good[:len(good)-1],
		"not json":  append(append([]byte{}, good[:8]...), bytes.Repeat([]byte{'x'}, len(good)-8)...),
	} {
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func TestHeaderThenDataIsEncode(t *testing.T) {
	img := Tensor{Name: "image", DType: U8, Shape: []int{2, 3}, Data: []byte{1, 2, 3, 4, 5, 6}}
	lbl := Tensor{Name: "label", DType: I64, Shape: []int{1}, Data: make([]byte, 8)}
	meta := map[string]string{"keys": `["a","b"]`}
	whole, err := Encode([]Tensor{img, lbl}, meta)
	if err != nil {
		t.Fatal(err)
	}
	head, size, err := Header([]Tensor{img, lbl}, meta)
	if err != nil {
		t.Fatal(err)
	}
	streamed := append(append(append([]byte{}, head...), img.Data...), lbl.Data...)
	if !bytes.Equal(streamed, whole) || size != len(whole) {
		t.Errorf("header + data = %d bytes (size %d), Encode = %d bytes; equal %v", len(streamed), size, len(whole), bytes.Equal(streamed, whole))
	}
	// And what a server streams this way reads back as written.
	f, err := Decode(streamed)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["keys"] != meta["keys"] || !bytes.Equal(f.Tensors["image"].Data, img.Data) ||
		!bytes.Equal(f.Tensors["label"].Data, lbl.Data) || f.Tensors["image"].DType != U8 || len(f.Tensors["image"].Shape) != 2 {
		t.Errorf("decoded %+v, want the tensors and metadata written", f)
	}
}

// withHeader is a file whose header is h and whose data is data.
func withHeader(h string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(b, h...), data...)
}

func TestDecodeRefusesShapesThatOverflow(t *testing.T) {
	for name, c := range map[string]struct {
		header string
		data   []byte
	}{
		// 4 x 2^62 = 2^64 elements wraps to 0 in an int64 product: without
		// an overflow check it matched the empty data.
		"product wraps to zero": {`{"x":{"dtype":"U8","shape":[4,4611686018427387904],"data_offsets":[0,0]}}`, nil},
		// (2^62+1) x 4 wraps to 4, the data's length.
		"product wraps to the data length": {`{"x":{"dtype":"U8","shape":[4611686018427387905,4],"data_offsets":[0,4]}}`, []byte{1, 2, 3, 4}},
		// 2^61 elements fit an int, their 8-byte I64 bytes (2^64) do not.
		"bytes wrap to zero": {`{"x":{"dtype":"I64","shape":[2305843009213693952],"data_offsets":[0,0]}}`, nil},
		// Empty, yet a row of it spans more than an int can count.
		"empty but too wide": {`{"x":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}}`, nil},
		"more than the data": {`{"x":{"dtype":"U8","shape":[4294967296,2],"data_offsets":[0,4]}}`, []byte{1, 2, 3, 4}},
		"negative":           {`{"x":{"dtype":"U8","shape":[-4,-1],"data_offsets":[0,4]}}`, []byte{1, 2, 3, 4}},
	} {
		f, err := Decode(withHeader(c.header, c.data))
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Decode = %+v, %v; want ErrCorrupt", name, f.Tensors, err)
		}
	}
}

func TestEncodeRefusesShapesThatOverflow(t *testing.T) {
	for _, c := range []struct {
		shape []int
		data  int // what the product wraps to
	}{{[]int{4, 1 << 62}, 0}, {[]int{(1 << 62) + 1, 4}, 4}, {[]int{0, 1 << 32, 1 << 32}, 0}} {
		if _, err := Encode([]Tensor{{Name: "x", DType: U8, Shape: c.shape, Data: make([]byte, c.data)}}, nil); err == nil {
			t.Errorf("Encode of U8%v with %d bytes: no error", c.shape, c.data)
		}
	}
}

func TestDecodeNamesAnOverflowingShape(t *testing.T) {
	_, err := Decode(withHeader(`{"x":{"dtype":"U8","shape":[4,4611686018427387904],"data_offsets":[0,0]}}`, nil))
	if want := `tensor "x": U8[4 4611686018427387904]: a dimension is negative, or the size overflows an int`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it to say %q", err, want)
	}
}
