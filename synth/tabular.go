package synth

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// TabularOptions shapes a synthetic click-log dataset in the Criteo TSV
// layout: label, 13 integer features, 26 categorical 8-hex-digit features.
type TabularOptions struct {
	Samples int
	Shards  int
	Seed    uint64
	// MissingRate is the chance that any one feature value is left empty.
	MissingRate float64
}

// DefaultTabularOptions are the demo's.
func DefaultTabularOptions() TabularOptions {
	return TabularOptions{Samples: 50000, Shards: 8, Seed: 1, MissingRate: 0.1}
}

// Validate names the first option out of range.
func (o TabularOptions) Validate() error {
	switch {
	case o.Samples < 1 || o.Samples > 100_000_000:
		return fmt.Errorf("samples %d: want 1..100000000", o.Samples)
	case o.Shards < 1 || o.Shards > o.Samples:
		return fmt.Errorf("shards %d: want 1..samples (%d)", o.Shards, o.Samples)
	case !(o.MissingRate >= 0 && o.MissingRate < 1):
		return fmt.Errorf("missing rate %v: want 0 <= rate < 1", o.MissingRate)
	}
	return nil
}

// Per-column shapes, loosely like the real data set's: counts with heavy
// tails (I2 may be negative), categoricals from Zipf-distributed
// vocabularies of very different sizes.
var (
	denseScale  = [13]float64{1.2, 3.5, 2.0, 1.8, 8.0, 4.5, 2.2, 2.8, 4.0, 0.6, 1.5, 0.8, 2.6}
	cardinality = [26]uint64{1400, 550, 200_000, 120_000, 300, 24, 12_000, 630, 3, 90_000, 5_500, 180_000, 3_200,
		27, 14_000, 160_000, 10, 5_600, 2_100, 4, 170_000, 17, 15, 100_000, 105, 85_000}
)

// Tabular generates .tsv shards in memory. Sample i goes to shard
// i%Shards as its line i/Shards. Clicks (label 1, about a quarter) are
// likelier with a high I1 and a frequent C1 value, so there is signal.
func Tabular(o TabularOptions) ([]Shard, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x7ab1e))
	zipf := make([]*rand.Zipf, len(cardinality))
	for j, c := range cardinality {
		zipf[j] = rand.NewZipf(rng, 1.1, 2, c-1)
	}
	bufs := make([]bytes.Buffer, o.Shards)
	out := make([]Shard, o.Shards)
	for s := range out {
		out[s].Name = fmt.Sprintf("shard-%06d.tsv", s)
	}
	var line []byte
	for i := range o.Samples {
		line = line[:0]
		var dense [13]int64
		var present [13]bool
		for k := range dense {
			present[k] = rng.Float64() >= o.MissingRate
			v := math.Exp(rng.NormFloat64()*denseScale[k]/2 + denseScale[k]/2)
			dense[k] = max(int64(v)-1, 0)
			if k == 1 && rng.IntN(20) == 0 {
				dense[k] = -1 - int64(rng.IntN(3))
			}
		}
		var cats [26]uint64
		var catPresent [26]bool
		for j := range cats {
			catPresent[j] = rng.Float64() >= o.MissingRate
			cats[j] = zipf[j].Uint64()
		}
		score := -1.6 + 0.25*math.Log1p(float64(max(dense[0], 0)))
		if catPresent[0] && cats[0] < 5 {
			score += 1
		}
		label := 0
		if rng.Float64() < 1/(1+math.Exp(-score)) {
			label = 1
		}
		line = strconv.AppendInt(line, int64(label), 10)
		for k := range dense {
			line = append(line, '\t')
			if present[k] {
				line = strconv.AppendInt(line, dense[k], 10)
			}
		}
		for j := range cats {
			line = append(line, '\t')
			if catPresent[j] {
				line = fmt.Appendf(line, "%08x", uint32(mix64(uint64(j)<<40^cats[j]^o.Seed<<20)))
			}
		}
		line = append(line, '\n')
		bufs[i%o.Shards].Write(line)
		out[i%o.Shards].Samples++
	}
	for s := range out {
		out[s].Data = bufs[s].Bytes()
	}
	return out, nil
}

// mix64 is splitmix64's finaliser: a category rank to a hex-looking id.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
