package pipeline

import (
	"bytes"
	"testing"

	"github.com/sluice-project/sluice/internal/synth"
	"github.com/sluice-project/sluice/internal/wds"
)

// BenchmarkProcess is one sample end to end (decode, crop/resize, flip,
// label) on synth's default-sized images (160..480 px sides).
func BenchmarkProcess(b *testing.B) {
	shards, err := synth.Images(synth.ImageOptions{Samples: 16, Shards: 1, Seed: 1, MinSide: 160, MaxSide: 480, Quality: 90, Classes: 10})
	if err != nil {
		b.Fatal(err)
	}
	var ss []wds.Sample
	r := wds.NewReader(bytes.NewReader(shards[0].Data), 0)
	for {
		s, err := r.Next()
		if err != nil {
			break
		}
		ss = append(ss, s)
	}
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			p, err := Lookup(name, Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s := ss[i%len(ss)]
				if _, err := p.Process(s, SampleSeed(1, 0, s.Key)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
