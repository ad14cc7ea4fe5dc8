package parquet

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The Parquet library decodes Thrift (the footer, page headers) trusting
// the sizes it declares: a list header of a few bytes can make it allocate
// gigabytes of structs, a deep nesting of unknown fields can overflow the
// stack. checkThrift walks the compact-protocol bytes first, with no
// allocation, and refuses what could do either; the library then decodes
// bytes known to be within bounds.

// Bounds of one Thrift value.
const (
	// maxThriftDepth bounds nesting (structs, lists, maps): Parquet's own
	// structures nest about 8 deep.
	maxThriftDepth = 32
	// thriftStructCost is what one struct of a list is charged: the
	// largest of Parquet's (ColumnChunk, 560 bytes) with its nested
	// optional parts.
	thriftStructCost = 1 << 10
	// thriftValueCost is what one other list element is charged.
	thriftValueCost = 32
)

// Compact protocol types.
const (
	ctStop = iota
	ctTrue
	ctFalse
	ctByte
	ctI16
	ctI32
	ctI64
	ctDouble
	ctBinary
	ctList
	ctSet
	ctMap
	ctStruct
	ctUUID
)

var errThriftEOF = errors.New("truncated")

// thriftWalk checks one compact-protocol struct.
type thriftWalk struct {
	b      []byte
	off    int
	budget int64 // bytes the decoded lists may still take
}

// checkThrift checks the struct at the start of b and returns its length in
// bytes. budget bounds what the lists in it may take once decoded.
func checkThrift(b []byte, budget int64) (int, error) {
	w := &thriftWalk{b: b, budget: budget}
	if err := w.structure(0); err != nil {
		return 0, fmt.Errorf("thrift at byte %d: %w", w.off, err)
	}
	return w.off, nil
}

func (w *thriftWalk) byte() (byte, error) {
	if w.off >= len(w.b) {
		return 0, errThriftEOF
	}
	c := w.b[w.off]
	w.off++
	return c, nil
}

func (w *thriftWalk) uvarint() (uint64, error) {
	v, n := binary.Uvarint(w.b[w.off:])
	if n <= 0 {
		if n == 0 {
			return 0, errThriftEOF
		}
		return 0, errors.New("varint overflows 64 bits")
	}
	w.off += n
	return v, nil
}

func (w *thriftWalk) skip(n uint64) error {
	if n > uint64(len(w.b)-w.off) {
		return fmt.Errorf("%d bytes declared, %d left: %w", n, len(w.b)-w.off, errThriftEOF)
	}
	w.off += int(n)
	return nil
}

func (w *thriftWalk) structure(depth int) error {
	if depth > maxThriftDepth {
		return fmt.Errorf("nested over %d deep", maxThriftDepth)
	}
	for {
		h, err := w.byte()
		if err != nil {
			return err
		}
		t := h & 0x0f
		if t == ctStop {
			return nil
		}
		if h>>4 == 0 { // the field id follows as a zigzag varint
			if _, err := w.uvarint(); err != nil {
				return err
			}
		}
		if t == ctTrue || t == ctFalse {
			continue // a field's bool is in its type
		}
		if err := w.value(t, depth); err != nil {
			return err
		}
	}
}

func (w *thriftWalk) value(t byte, depth int) error {
	switch t {
	case ctTrue, ctFalse, ctByte:
		return w.skip(1)
	case ctI16, ctI32, ctI64:
		_, err := w.uvarint()
		return err
	case ctDouble:
		return w.skip(8)
	case ctUUID:
		return w.skip(16)
	case ctBinary:
		n, err := w.uvarint()
		if err != nil {
			return err
		}
		return w.skip(n)
	case ctList, ctSet:
		h, err := w.byte()
		if err != nil {
			return err
		}
		n, et := uint64(h>>4), h&0x0f
		if n == 15 {
			if n, err = w.uvarint(); err != nil {
				return err
			}
		}
		if err := w.charge(n, et); err != nil {
			return err
		}
		for range n {
			if err := w.element(et, depth+1); err != nil {
				return err
			}
		}
		return nil
	case ctMap:
		n, err := w.uvarint()
		if err != nil || n == 0 {
			return err
		}
		kv, err := w.byte()
		if err != nil {
			return err
		}
		if err := w.charge(n, kv>>4); err != nil {
			return err
		}
		if err := w.charge(n, kv&0x0f); err != nil {
			return err
		}
		for range n {
			if err := w.element(kv>>4, depth+1); err != nil {
				return err
			}
			if err := w.element(kv&0x0f, depth+1); err != nil {
				return err
			}
		}
		return nil
	case ctStruct:
		return w.structure(depth + 1)
	}
	return fmt.Errorf("unknown type %d", t)
}

// element checks one element of a list, set or map.
func (w *thriftWalk) element(t byte, depth int) error {
	if t == ctTrue || t == ctFalse {
		return w.skip(1) // a list's bools take a byte each
	}
	if t == ctStop {
		return errors.New("list of type 0")
	}
	return w.value(t, depth)
}

// charge takes n elements of type t from the budget. Every element takes
// at least a byte, so a count over the bytes left is refused outright.
func (w *thriftWalk) charge(n uint64, t byte) error {
	if n > uint64(len(w.b)-w.off) {
		return fmt.Errorf("a list of %d elements in %d bytes: %w", n, len(w.b)-w.off, errThriftEOF)
	}
	cost := int64(thriftValueCost)
	if t == ctStruct {
		cost = thriftStructCost
	}
	w.budget -= int64(n) * cost
	if w.budget < 0 {
		return errors.New("lists too large to decode within the footer memory limit")
	}
	return nil
}
