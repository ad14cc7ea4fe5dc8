package sweep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/synth"
)

// Pipeline is the sweep's preprocessing: the images decoded and cut to
// 32x32, so that each trial's batches are small and the replicas' work is
// the JPEG decode and resize.
const Pipeline = `name: sweep-small
label: {member: cls}
ops: [decode, {op: resize, size: 40}, {op: center_crop, size: 32}, to_uint8_hwc]
`

// perReplicaRate measures the pipeline's samples per second on one core
// over the dataset's first shards for about budget: the per-replica rate
// the planner pre-warms with (a replica has one core), as `sluice bench
// ops` measures it.
func perReplicaRate(ctx context.Context, shards []synth.Shard, budget time.Duration) (float64, error) {
	p, err := pipeline.Parse([]byte(Pipeline), pipeline.Options{})
	if err != nil {
		return 0, fmt.Errorf("building the sweep pipeline: %w", err)
	}
	var samples []wds.Sample
	for _, sh := range shards[:min(len(shards), 2)] {
		r := wds.NewReader(bytes.NewReader(sh.Data), 0)
		for {
			s, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err == nil {
				samples = append(samples, s)
			}
		}
	}
	if len(samples) == 0 {
		return 0, errors.New("calibrating: no samples in the first shards")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	start := time.Now()
	n := 0
	for time.Since(start) < budget {
		for _, s := range samples {
			if _, err := p.Process(s, uint64(n)); err != nil {
				return 0, fmt.Errorf("calibrating on sample %s: %w", s.Key, err)
			}
			n++
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
