//go:build unix

package pipeline

import (
	"context"
	"testing"
)

// BenchmarkTextField is the text op's read of the corpus documents' JSON
// lines (corpusDocs: ~5 KB of text in one string with escapes each): old
// from jsonObject's map (the op before jsonField), new as the op reads
// them. cpu-ns/doc is the process's CPU time per document.
//
//	go test -run '^$' -bench BenchmarkTextField -cpu 1 ./functions/pipeline/
func BenchmarkTextField(b *testing.B) {
	docs := corpusDocs(b)
	var n int64
	for _, d := range docs {
		n += int64(len(d.Files["jsonl"]))
	}
	o := &textOp{source: "auto", field: "text"}
	for _, c := range []struct {
		name string
		read func(*state) error
	}{
		{"old", func(st *state) error { return o.fromObject(st, jsonMembers) }},
		{"new", o.apply},
	} {
		b.Run(c.name, func(b *testing.B) {
			st := newState()
			b.SetBytes(n)
			b.ReportAllocs()
			c0 := cpuTime(b)
			for b.Loop() {
				for _, d := range docs {
					st.start(context.Background(), d, 0, 0, nil, false)
					if err := c.read(st); err != nil {
						b.Fatal(err)
					}
					st.finish()
				}
			}
			b.ReportMetric(float64(cpuTime(b)-c0)/float64(b.N*len(docs)), "cpu-ns/doc")
		})
	}
}
