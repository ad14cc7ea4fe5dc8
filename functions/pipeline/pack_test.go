package pipeline

import (
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// row is a packed row read back as ids.
type row struct {
	Key                string
	IDs, Pos, Cu, Mask []int32
	NumSeqs            int32
}

func readRow(t *testing.T, o Output) row {
	t.Helper()
	ints := func(b []byte) []int32 {
		v := make([]int32, len(b)/4)
		for i := range v {
			v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v
	}
	var names []string
	for _, f := range o.Fields {
		names = append(names, f.Name)
	}
	if want := []string{FieldInputIDs, FieldPositionIDs, FieldCuSeqlens, FieldNumSeqs, FieldAttnMask}; !slices.Equal(names, want) {
		t.Fatalf("row %s: fields %v, want %v", o.Key, names, want)
	}
	return row{Key: o.Key, IDs: ints(o.Fields[0].Data), Pos: ints(o.Fields[1].Data), Cu: ints(o.Fields[2].Data),
		NumSeqs: ints(o.Fields[3].Data)[0], Mask: ints(o.Fields[4].Data)}
}

func packAll(t *testing.T, o PackOptions, docs [][]int32) ([]Output, PackStats) {
	t.Helper()
	p, err := NewPacker(o, "s")
	if err != nil {
		t.Fatal(err)
	}
	var out []Output
	for _, d := range docs {
		p.Add(d)
		out = append(out, p.Take()...)
	}
	return append(out, p.Close()...), p.Stats()
}

func TestPackerRowsByValue(t *testing.T) {
	docs := [][]int32{{1, 2}, {3, 4, 5, 6, 7}, {8}}
	// The stream: 1 2 9 | 3 4 5 6 7 9 | 8 9, cut every 4 tokens; the
	// second document continues into row 1 as a sequence from position 0.
	full := []row{
		{Key: "s/row00000000", IDs: []int32{1, 2, 9, 3}, Pos: []int32{0, 1, 2, 0}, Cu: []int32{0, 3, 4, 4, 4}, NumSeqs: 2, Mask: []int32{1, 1, 1, 1}},
		{Key: "s/row00000001", IDs: []int32{4, 5, 6, 7}, Pos: []int32{0, 1, 2, 3}, Cu: []int32{0, 4, 4, 4, 4}, NumSeqs: 1, Mask: []int32{1, 1, 1, 1}},
	}
	tail := row{Key: "s/row00000002", IDs: []int32{9, 8, 9, 0}, Pos: []int32{0, 0, 1, 0}, Cu: []int32{0, 1, 3, 4, 4}, NumSeqs: 3, Mask: []int32{1, 1, 1, 0}}

	out, st := packAll(t, PackOptions{SeqLen: 4, Tail: TailPad, EOS: 9, PadID: 0}, docs)
	var got []row
	for _, o := range out {
		got = append(got, readRow(t, o))
	}
	if diff := cmp.Diff(append(slices.Clone(full), tail), got); diff != "" {
		t.Errorf("tail pad (-want +got):\n%s", diff)
	}
	if want := (PackStats{Docs: 3, Tokens: 11, Rows: 3, Pad: 1}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}

	out, st = packAll(t, PackOptions{SeqLen: 4, Tail: TailDrop, EOS: 9, PadID: 0}, docs)
	got = nil
	for _, o := range out {
		got = append(got, readRow(t, o))
	}
	if diff := cmp.Diff(full, got); diff != "" {
		t.Errorf("tail drop (-want +got):\n%s", diff)
	}
	if want := (PackStats{Docs: 3, Tokens: 11, Rows: 2, Dropped: 3}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

// A document the post-processor already ended with EOS gets no second
// one; an empty document is its EOS alone.
func TestPackerEOSOnceAndEmptyDocuments(t *testing.T) {
	out, _ := packAll(t, PackOptions{SeqLen: 6, Tail: TailPad, EOS: 9, PadID: 7}, [][]int32{{1, 9}, {}, {2}})
	r := readRow(t, out[0])
	if want := []int32{1, 9, 9, 2, 9, 7}; !slices.Equal(r.IDs, want) {
		t.Errorf("ids %v, want %v", r.IDs, want)
	}
	if want := []int32{0, 2, 3, 5, 6, 6, 6}; !slices.Equal(r.Cu, want) || r.NumSeqs != 4 {
		t.Errorf("cu_seqlens %v (%d), want %v (4)", r.Cu, r.NumSeqs, want)
	}
}

func TestPackerOptionsChecked(t *testing.T) {
	for _, o := range []PackOptions{{SeqLen: 1, Tail: TailPad}, {SeqLen: MaxSeqLen + 1, Tail: TailPad}, {SeqLen: 8, Tail: "wrap"}} {
		if _, err := NewPacker(o, "s"); err == nil {
			t.Errorf("NewPacker(%+v): no error", o)
		}
	}
}

// unpack reassembles the documents from rows: the real tokens of every
// row in order, each sequence that does not end in EOS continuing into
// the next, and checks each row's positions and boundaries agree.
func unpack(t *testing.T, rows []row, eos int32) [][]int32 {
	t.Helper()
	var docs [][]int32
	var open []int32
	for _, r := range rows {
		n := int32(len(r.IDs))
		cu := r.Cu[:r.NumSeqs+1]
		if cu[0] != 0 || cu[len(cu)-1] != n || !slices.IsSorted(cu) {
			t.Fatalf("row %s: cu_seqlens %v of %d", r.Key, r.Cu, r.NumSeqs)
		}
		for _, v := range r.Cu[r.NumSeqs+1:] {
			if v != n {
				t.Fatalf("row %s: cu_seqlens %v: want %d after the %d sequences", r.Key, r.Cu, n, r.NumSeqs)
			}
		}
		for s := range int(r.NumSeqs) {
			a, b := cu[s], cu[s+1]
			if a == b {
				t.Fatalf("row %s: empty sequence %d", r.Key, s)
			}
			for i := a; i < b; i++ {
				if r.Pos[i] != i-a {
					t.Fatalf("row %s: position %d = %d, want %d", r.Key, i, r.Pos[i], i-a)
				}
				if r.Mask[i] == 0 {
					if s != int(r.NumSeqs)-1 {
						t.Fatalf("row %s: padding at %d in sequence %d, not the last", r.Key, i, s)
					}
					continue
				}
				open = append(open, r.IDs[i])
			}
			if open != nil && open[len(open)-1] == eos {
				docs, open = append(docs, open), nil
			}
		}
	}
	if open != nil {
		docs = append(docs, open) // a dropped tail's document, cut
	}
	return docs
}

// Random documents, some longer than several rows: every token of every
// document in exactly one row, in order, each followed by EOS.
func TestPackerEveryTokenOnceInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const eos = 0
	for trial := range 200 {
		seqLen := 2 + rng.IntN(40)
		var docs, want [][]int32
		for range rng.IntN(30) {
			d := make([]int32, rng.IntN(3*seqLen))
			for i := range d {
				d[i] = 1 + rng.Int32N(1000)
			}
			docs = append(docs, d)
			want = append(want, append(slices.Clone(d), eos))
		}
		out, st := packAll(t, PackOptions{SeqLen: seqLen, Tail: TailPad, EOS: eos, PadID: 0}, docs)
		var rows []row
		keys := map[string]bool{}
		for _, o := range out {
			r := readRow(t, o)
			if keys[r.Key] {
				t.Fatalf("trial %d: key %s twice", trial, r.Key)
			}
			keys[r.Key] = true
			rows = append(rows, r)
		}
		if got := unpack(t, rows, eos); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("trial %d (seq_len %d): documents reassembled differ:\n got %v\nwant %v", trial, seqLen, got, want)
		}
		if st.Rows*int64(seqLen) != st.Tokens+st.Pad || st.Pad >= int64(seqLen) {
			t.Fatalf("trial %d: stats %+v: rows x seq_len != tokens + pad, or pad of a row or more", trial, st)
		}
		again, _ := packAll(t, PackOptions{SeqLen: seqLen, Tail: TailPad, EOS: eos, PadID: 0}, docs)
		if !reflect.DeepEqual(out, again) {
			t.Fatalf("trial %d: packing the same documents again gave other rows", trial)
		}
		// Fed in random parts, rows taken between them: the same rows.
		pk, _ := NewPacker(PackOptions{SeqLen: seqLen, Tail: TailPad, EOS: eos, PadID: 0}, "s")
		var parts []Output
		for _, d := range docs {
			for len(d) > 0 {
				n := min(len(d), rng.IntN(seqLen+1))
				pk.Append(d[:n])
				parts = append(parts, pk.Take()...)
				d = d[n:]
			}
			pk.EndDocument()
		}
		if parts = append(parts, pk.Close()...); !reflect.DeepEqual(parts, out) && len(out)+len(parts) > 0 {
			t.Fatalf("trial %d: documents fed in parts gave other rows", trial)
		}
		drop, dst := packAll(t, PackOptions{SeqLen: seqLen, Tail: TailDrop, EOS: eos, PadID: 0}, docs)
		if int64(len(drop)) != st.Rows-min(st.Pad, 1) || dst.Dropped != (int64(seqLen)-st.Pad)%int64(seqLen) {
			t.Fatalf("trial %d: tail drop gave %d rows (dropped %d), pad gave %d (pad %d)", trial, len(drop), dst.Dropped, st.Rows, st.Pad)
		}
		if len(drop) > 0 && !reflect.DeepEqual(drop, out[:len(drop)]) {
			t.Fatalf("trial %d: tail drop's rows differ from tail pad's full rows", trial)
		}
	}
}
