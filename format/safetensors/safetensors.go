package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
)

// DType names an element type as the format spells it.
type DType string

// The dtypes Sluice produces.
const (
	U8  DType = "U8"
	I32 DType = "I32"
	I64 DType = "I64"
	F16 DType = "F16"
	F32 DType = "F32"
)

// Size is the byte width of one element.
func (d DType) Size() int {
	switch d {
	case U8:
		return 1
	case F16:
		return 2
	case I32, F32:
		return 4
	case I64:
		return 8
	}
	return 0
}

// Tensor is one named array; Data holds its elements little-endian, row-major.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// File is a decoded safetensors file. Tensor data aliases the input buffer.
type File struct {
	Tensors  map[string]Tensor
	Metadata map[string]string
}

// maxHeader bounds the JSON header we accept, so a corrupt length cannot make
// us allocate gigabytes (the reference implementation uses 100 MB).
const maxHeader = 100 << 20

type entry struct {
	DType       DType  `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt safetensors")

var errShape = errors.New("a dimension is negative, or the size overflows an int")

// Encode lays tensors out in the order given and returns the whole file.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	head, size, err := Header(tensors, metadata)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, size)
	out = append(out, head...)
	for _, t := range tensors {
		out = append(out, t.Data...)
	}
	return out, nil
}

// Header returns the start of the file Encode would write (the header's
// length and the header) and the whole file's size, so that a server can
// write the tensors' data after it without copying them into one buffer.
func Header(tensors []Tensor, metadata map[string]string) (head []byte, size int, err error) {
	lengths := make([]int, len(tensors))
	for i, t := range tensors {
		lengths[i] = len(t.Data)
	}
	return HeaderLengths(tensors, lengths, metadata)
}

// HeaderLengths is Header for tensors whose data is held elsewhere (in
// pieces, say): lengths[i] is the size of tensor i's data; their Data is
// not read.
func HeaderLengths(tensors []Tensor, lengths []int, metadata map[string]string) (head []byte, size int, err error) {
	if len(lengths) != len(tensors) {
		return nil, 0, fmt.Errorf("%d tensors, %d lengths", len(tensors), len(lengths))
	}
	header := make(map[string]any, len(tensors)+1)
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	off := 0
	for i, t := range tensors {
		n := lengths[i]
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, 0, fmt.Errorf("tensor name %q is reserved or empty", t.Name)
		}
		if _, dup := header[t.Name]; dup {
			return nil, 0, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		want := t.DType.Bytes(t.Shape)
		if want < 0 {
			return nil, 0, fmt.Errorf("tensor %q: %s%v: %w", t.Name, t.DType, t.Shape, errShape)
		}
		if want != n {
			return nil, 0, fmt.Errorf("tensor %q: %s%v needs %d bytes, has %d", t.Name, t.DType, t.Shape, want, n)
		}
		header[t.Name] = entry{DType: t.DType, Shape: t.Shape, DataOffsets: [2]int{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding header: %w", err)
	}
	// Pad the header with spaces so the data starts 8-byte aligned, as the
	// reference writer does; readers may then view it in place.
	for (8+len(h))%8 != 0 {
		h = append(h, ' ')
	}
	head = make([]byte, 8, 8+len(h))
	binary.LittleEndian.PutUint64(head, uint64(len(h)))
	head = append(head, h...)
	return head, len(head) + off, nil
}

// Decode parses b; tensors alias b.
func Decode(b []byte) (File, error) {
	if len(b) < 8 {
		return File{}, fmt.Errorf("%w: %d bytes, shorter than the header length", ErrCorrupt, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return File{}, fmt.Errorf("%w: header length %d does not fit in %d bytes", ErrCorrupt, n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return File{}, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	data := b[8+n:]
	f := File{Tensors: make(map[string]Tensor, len(raw))}
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "__metadata__" {
			if err := json.Unmarshal(raw[name], &f.Metadata); err != nil {
				return File{}, fmt.Errorf("%w: metadata: %v", ErrCorrupt, err)
			}
			continue
		}
		var e entry
		if err := json.Unmarshal(raw[name], &e); err != nil {
			return File{}, fmt.Errorf("%w: tensor %q: %v", ErrCorrupt, name, err)
		}
		lo, hi := e.DataOffsets[0], e.DataOffsets[1]
		if e.DType.Size() == 0 {
			return File{}, fmt.Errorf("%w: tensor %q: unsupported dtype %q", ErrCorrupt, name, e.DType)
		}
		if e.DType.Bytes(e.Shape) < 0 {
			return File{}, fmt.Errorf("%w: tensor %q: %s%v: %w", ErrCorrupt, name, e.DType, e.Shape, errShape)
		}
		if lo < 0 || hi < lo || hi > len(data) || hi-lo != e.DType.Bytes(e.Shape) {
			return File{}, fmt.Errorf("%w: tensor %q: offsets [%d,%d) do not match %s%v in %d data bytes",
				ErrCorrupt, name, lo, hi, e.DType, e.Shape, len(data))
		}
		f.Tensors[name] = Tensor{Name: name, DType: e.DType, Shape: e.Shape, Data: data[lo:hi:hi]}
	}
	return f, nil
}

// Elements is the number of elements a shape holds; -1 for a negative
// dimension, or where the shape's extent (the product of its dimensions,
// a zero counted as one) overflows an int: a shape from outside may
// otherwise wrap around to match any data length, and a zero dimension
// does not make the others' product safe to compute (a row's size).
func Elements(shape []int) int {
	n, extent := 1, 1
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d > 0 {
			if extent > math.MaxInt/d {
				return -1
			}
			extent *= d
		}
		n *= d
	}
	return n
}

// Bytes is the byte size of a tensor of d with shape; -1 where d is not
// one of the dtypes Sluice knows, the shape is not valid (see Elements) or
// the size overflows an int.
func (d DType) Bytes(shape []int) int {
	n, size := Elements(shape), d.Size()
	if n < 0 || size == 0 || n > math.MaxInt/size {
		return -1
	}
	return n * size
}
