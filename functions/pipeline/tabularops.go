package pipeline

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/functions/tabular"
)

// Tabular ops: Criteo-style TSV lines (see package tabular for the exact
// hashing, reproducible in Python).

func tabularOps() []OpSpec {
	return []OpSpec{{
		Name: "criteo",
		Doc:  `parses a Criteo TSV line: "label" I64 [], "dense" F32 [13] (missing filled, log1p), "sparse" I64 [26] (FNV-1a 64 mod buckets)`,
		Params: []Param{
			{Name: "member", Type: ParamString, Default: "tsv", Check: nonEmpty, Doc: "member holding the line (a .tsv shard's lines arrive as tsv)"},
			{Name: "dense_fill", Type: ParamFloat, Default: 0.0, Bounded: true, Min: -1e9, Max: 1e9, Doc: "value of a missing dense feature (not log1p'd)"},
			{Name: "log1p", Type: ParamBool, Default: true, Doc: "dense features become log(1 + max(x, 0))"},
			{Name: "buckets", Type: ParamInts, Default: []int{tabular.DefaultBuckets}, Bounded: true, Min: 1, Max: 1 << 62, Check: bucketCount,
				Doc: "hash buckets of C1..C26: one count for all, or 26"},
		},
		In: []Type{TypeSample}, Out: TypeTabular,
		build: func(p Params, _ Options) (stage, error) {
			o := tabular.DefaultCriteoOptions()
			o.DenseFill = float32(p.Float("dense_fill"))
			o.Log1p = p.Bool("log1p")
			b := p.Ints("buckets")
			for i := range o.Buckets {
				o.Buckets[i] = uint64(b[min(i, len(b)-1)])
			}
			if err := o.Validate(); err != nil {
				return nil, err
			}
			return &criteoOp{member: p.String("member"), o: o}, nil
		},
	}}
}

func bucketCount(v any) error {
	if n := len(v.([]int)); n != 1 && n != tabular.NumSparse {
		return fmt.Errorf("want 1 or %d bucket counts, got %d", tabular.NumSparse, n)
	}
	return nil
}

func tabularBuiltins() []Definition {
	return []Definition{{
		Name: "criteo",
		Doc:  `Criteo TSV lines, 2^20 buckets, log1p: "label" I64 [], "dense" F32 [13], "sparse" I64 [26]`,
		Ops:  []OpCall{{Op: "criteo"}},
	}}
}

type criteoOp struct {
	member string
	o      tabular.CriteoOptions
}

func (c *criteoOp) apply(st *state) error {
	line, ok := st.sample.Files[c.member]
	if !ok {
		return fmt.Errorf("no %s member (sample has %s)", c.member, describeMembers(st.sample))
	}
	label, dense, sparse, err := tabular.ParseCriteo(line, c.o)
	if err != nil {
		return fmt.Errorf("member %s: %w", c.member, err)
	}
	lb := make([]byte, 8)
	binary.LittleEndian.PutUint64(lb, uint64(label))
	db := make([]byte, 4*len(dense))
	for i, x := range dense {
		binary.LittleEndian.PutUint32(db[4*i:], math.Float32bits(x))
	}
	sb := make([]byte, 8*len(sparse))
	for i, x := range sparse {
		binary.LittleEndian.PutUint64(sb[8*i:], uint64(x))
	}
	st.fields = append(st.fields,
		Field{Name: "label", DType: safetensors.I64, Shape: []int{}, Data: lb},
		Field{Name: "dense", DType: safetensors.F32, Shape: []int{len(dense)}, Data: db},
		Field{Name: "sparse", DType: safetensors.I64, Shape: []int{len(sparse)}, Data: sb})
	return nil
}
