package wire

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"unsafe"
)

// MetaExpand, in a chunk's metadata, names the tensors its receiver widens
// before a trainer sees them: a JSON object {tensor: Expansion}. A function
// sends expansions only for a task that asks (ShardTask.Expand).
const MetaExpand = "expand"

// MaxExpandChannels bounds an expansion's channels (RGBA at most).
const MaxExpandChannels = 4

// Expansion widens a U8 [H,W,C] row into C planes of DType, [C,H,W]: byte v
// of channel c becomes element LUT[c*256+v]. It is a pipeline's last op
// when that op only widens bytes (normalize: a table per channel from
// uint8 to float, and HWC to CHW): the chunk carries the bytes the op
// reads, a quarter of the floats, and the receiver applies the table as it
// writes the trainer's batch (docs/performance.md).
type Expansion struct {
	DType string `json:"dtype"` // "F32" or "F16"
	LUT   []byte `json:"lut"`   // C*256 elements of DType, little-endian

	lut32 [][256]uint32 // decoded by Check
	lut16 [][256]uint16
}

// NewExpansion is the expansion of a table per channel, elements given as
// their bits (float32 bits for F32, binary16 for F16, in the low 16).
func NewExpansion(dtype string, tables [][256]uint32) (*Expansion, error) {
	e := &Expansion{DType: dtype}
	size := e.Size()
	if size == 0 {
		return nil, e.Check() // names the dtype
	}
	e.LUT = make([]byte, len(tables)*256*size)
	for c, t := range tables {
		for v, x := range t {
			o := (c*256 + v) * size
			if size == 4 {
				binary.LittleEndian.PutUint32(e.LUT[o:], x)
			} else {
				binary.LittleEndian.PutUint16(e.LUT[o:], uint16(x))
			}
		}
	}
	return e, e.Check()
}

// Size is the size of one output element (0 for an unknown dtype).
func (e *Expansion) Size() int {
	switch e.DType {
	case "F32":
		return 4
	case "F16":
		return 2
	}
	return 0
}

// Channels is C, the channels a row's pixels have.
func (e *Expansion) Channels() int {
	if s := e.Size(); s > 0 {
		return len(e.LUT) / (256 * s)
	}
	return 0
}

// Check names what is wrong with e, and readies its tables.
func (e *Expansion) Check() error {
	size := e.Size()
	if size == 0 {
		return fmt.Errorf("expansion dtype %q: want F32 or F16", e.DType)
	}
	c := len(e.LUT) / (256 * size)
	if c < 1 || c > MaxExpandChannels || len(e.LUT) != c*256*size {
		return fmt.Errorf("expansion table of %d bytes: want 256 %s elements per channel, 1..%d channels", len(e.LUT), e.DType, MaxExpandChannels)
	}
	e.lut32, e.lut16 = nil, nil
	for k := range c {
		if size == 4 {
			var t [256]uint32
			for v := range t {
				t[v] = binary.LittleEndian.Uint32(e.LUT[(k*256+v)*4:])
			}
			e.lut32 = append(e.lut32, t)
		} else {
			var t [256]uint16
			for v := range t {
				t[v] = binary.LittleEndian.Uint16(e.LUT[(k*256+v)*2:])
			}
			e.lut16 = append(e.lut16, t)
		}
	}
	return nil
}

// Equal reports whether e and o widen the same way (nil is no expansion).
func (e *Expansion) Equal(o *Expansion) bool {
	if e == nil || o == nil {
		return e == o
	}
	return e.DType == o.DType && slices.Equal(e.LUT, o.LUT)
}

// Expand writes src's expansion to dst: src is whole rows of rowBytes
// bytes (H*W*C), dst len(src)*Size() bytes. e must have passed Check.
func (e *Expansion) Expand(dst, src []byte, rowBytes int) {
	c := e.Channels()
	size := e.Size()
	hw := rowBytes / c
	for ; len(src) >= rowBytes; src, dst = src[rowBytes:], dst[rowBytes*size:] {
		row := src[:rowBytes]
		switch {
		case size == 4 && c == 3:
			expand3x32(dst[:rowBytes*4], row, hw, &e.lut32[0], &e.lut32[1], &e.lut32[2])
		case size == 4:
			for k := range c {
				plane, t := dst[k*hw*4:(k+1)*hw*4], &e.lut32[k]
				for i := range hw {
					binary.LittleEndian.PutUint32(plane[4*i:], t[row[i*c+k]])
				}
			}
		default:
			for k := range c {
				plane, t := dst[k*hw*2:(k+1)*hw*2], &e.lut16[k]
				for i := range hw {
					binary.LittleEndian.PutUint16(plane[2*i:], t[row[i*c+k]])
				}
			}
		}
	}
}

// expand3x32 is Expand's common case, RGB to float32 planes, one pass
// over the pixels writing the three planes together. On a little-endian
// machine, dst aligned, the planes are written as uint32s: 3x faster than
// byte by byte, and the agent's main cost per float32 image.
func expand3x32(dst, src []byte, hw int, r, g, b *[256]uint32) {
	src = src[:3*hw]
	if nativeLittleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%4 == 0 {
		out := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(dst))), 3*hw)
		pr, pg, pb := out[:hw], out[hw:2*hw], out[2*hw:3*hw]
		for i := range pr {
			p := src[3*i : 3*i+3 : 3*i+3]
			pr[i], pg[i], pb[i] = r[p[0]], g[p[1]], b[p[2]]
		}
		return
	}
	pr, pg, pb := dst[:4*hw], dst[4*hw:8*hw], dst[8*hw:12*hw]
	for len(src) >= 3 && len(pr) >= 4 && len(pg) >= 4 && len(pb) >= 4 {
		binary.LittleEndian.PutUint32(pr, r[src[0]])
		binary.LittleEndian.PutUint32(pg, g[src[1]])
		binary.LittleEndian.PutUint32(pb, b[src[2]])
		src, pr, pg, pb = src[3:], pr[4:], pg[4:], pb[4:]
	}
}

// nativeLittleEndian is whether this machine stores a uint32 as the wire
// does.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// EncodeExpansions is the MetaExpand value of m.
func EncodeExpansions(m map[string]*Expansion) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encoding expansions: %w", err)
	}
	return string(b), nil
}

// ParseExpansions reads a MetaExpand value, each expansion checked.
func ParseExpansions(s string) (map[string]*Expansion, error) {
	var m map[string]*Expansion
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("metadata %q: %w", MetaExpand, err)
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if m[n] == nil {
			return nil, fmt.Errorf("metadata %q: tensor %q: no expansion", MetaExpand, n)
		}
		if err := m[n].Check(); err != nil {
			return nil, fmt.Errorf("metadata %q: tensor %q: %w", MetaExpand, n, err)
		}
	}
	return m, nil
}
