package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestExpandWritesPlanes: rows of C channels become C planes of the
// table's elements, for RGB to F32 (Expand's own loop) and the other
// shapes (the general one), checked against a direct reading of the
// definition, over several rows at once.
func TestExpandWritesPlanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		dtype    string
		channels int
	}{{"F32", 3}, {"F32", 1}, {"F32", 4}, {"F16", 3}} {
		tables := make([][256]uint32, c.channels)
		for k := range tables {
			for v := range tables[k] {
				tables[k][v] = rng.Uint32()
			}
		}
		e, err := NewExpansion(c.dtype, tables)
		if err != nil {
			t.Fatal(err)
		}
		if e.Channels() != c.channels {
			t.Fatalf("%s x%d: %d channels", c.dtype, c.channels, e.Channels())
		}
		const h, w, rows = 3, 5, 4
		rowBytes := h * w * c.channels
		src := make([]byte, rows*rowBytes)
		for i := range src {
			src[i] = byte(rng.IntN(256))
		}
		size := e.Size()
		want := make([]byte, len(src)*size)
		for r := range rows {
			for p := range h * w {
				for k := range c.channels {
					v := tables[k][src[r*rowBytes+p*c.channels+k]]
					o := r*rowBytes*size + (k*h*w+p)*size
					if size == 4 {
						binary.LittleEndian.PutUint32(want[o:], v)
					} else {
						binary.LittleEndian.PutUint16(want[o:], uint16(v))
					}
				}
			}
		}
		// Into an aligned buffer and one that is not (the portable loop).
		for _, off := range []int{0, 1} {
			got := make([]byte, off+len(want))[off:]
			e.Expand(got, src, rowBytes)
			if !bytes.Equal(got, want) {
				t.Errorf("%s x%d, offset %d: expansion differs from the planes of the tables", c.dtype, c.channels, off)
			}
		}
	}
}

// TestParseExpansions reads what EncodeExpansions writes, and refuses
// each malformed expansion with an error naming it.
func TestParseExpansions(t *testing.T) {
	e, err := NewExpansion("F32", make([][256]uint32, 3))
	if err != nil {
		t.Fatal(err)
	}
	s, err := EncodeExpansions(map[string]*Expansion{"image": e})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseExpansions(s)
	if err != nil || !m["image"].Equal(e) || m["image"].Channels() != 3 {
		t.Fatalf("ParseExpansions(EncodeExpansions) = %v, %v", m, err)
	}
	if _, err := NewExpansion("BF16", make([][256]uint32, 3)); err == nil || !strings.Contains(err.Error(), `dtype "BF16"`) {
		t.Errorf("NewExpansion(BF16) = %v, want the dtype named", err)
	}
	for _, c := range []struct{ in, want string }{
		{`{"image":{"dtype":"F64","lut":""}}`, `dtype "F64"`},
		{`{"image":{"dtype":"F32","lut":"AAAA"}}`, "table of 3 bytes"},
		{`{"image":null}`, `tensor "image": no expansion`},
		{`{"image":{"dtype":"F16","lut":"` + base64.StdEncoding.EncodeToString(make([]byte, 5*256*2)) + `"}}`, "1..4 channels"},
		{`[1]`, `metadata "expand"`},
	} {
		if _, err := ParseExpansions(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseExpansions(%.40s...) = %v, want an error with %q", c.in, err, c.want)
		}
	}
}

// BenchmarkExpand is the agent's cost per ImageNet crop (224x224 RGB to
// float32 planes), in bytes of output per second.
func BenchmarkExpand(b *testing.B) {
	tables := make([][256]uint32, 3)
	e, err := NewExpansion("F32", tables)
	if err != nil {
		b.Fatal(err)
	}
	const row = 224 * 224 * 3
	src, dst := make([]byte, row), make([]byte, 4*row)
	b.SetBytes(4 * row)
	for b.Loop() {
		e.Expand(dst, src, row)
	}
}
