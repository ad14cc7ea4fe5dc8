package synth

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sluice-project/sluice/format/wds"
)

// ImageOptions shapes a synthetic image classification dataset.
type ImageOptions struct {
	Samples int
	Shards  int
	Seed    uint64
	// MinSide and MaxSide bound each image's width and height (pixels).
	MinSide, MaxSide int
	Quality          int
	Classes          int
	// Corrupt is how many samples get a broken JPEG (reported as failed
	// samples downstream, never a crash).
	Corrupt int
}

// DefaultImageOptions are the demo's: ImageNet-like but smaller images, so
// a 2-core machine finishes a few epochs in about a minute.
func DefaultImageOptions() ImageOptions {
	return ImageOptions{Samples: 2000, Shards: 24, Seed: 1, MinSide: 160, MaxSide: 480, Quality: 90, Classes: 10}
}

// Validate names the first option out of range.
func (o ImageOptions) Validate() error {
	switch {
	case o.Samples < 1 || o.Samples > 10_000_000:
		return fmt.Errorf("samples %d: want 1..10000000", o.Samples)
	case o.Shards < 1 || o.Shards > o.Samples:
		return fmt.Errorf("shards %d: want 1..samples (%d)", o.Shards, o.Samples)
	case o.MinSide < 8 || o.MaxSide < o.MinSide || o.MaxSide > 8192:
		return fmt.Errorf("image sides %d..%d: want 8 <= min <= max <= 8192", o.MinSide, o.MaxSide)
	case o.Quality < 1 || o.Quality > 100:
		return fmt.Errorf("jpeg quality %d: want 1..100", o.Quality)
	case o.Classes < 1:
		return fmt.Errorf("classes %d: want >= 1", o.Classes)
	case o.Corrupt < 0 || o.Corrupt > o.Samples:
		return fmt.Errorf("corrupt %d: want 0..samples (%d)", o.Corrupt, o.Samples)
	}
	return nil
}

// Images generates the shards in memory. Sample i goes to shard i%Shards;
// keys are zero-padded sample numbers, so they are unique across shards.
// Each sample draws from its own generator, seeded by (Seed, i), so the
// JPEGs are encoded on all cores and the bytes still depend on Seed alone.
func Images(o ImageOptions) ([]Shard, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	corrupt := map[int]bool{}
	for _, i := range rand.New(rand.NewPCG(o.Seed, 0x5eed)).Perm(o.Samples)[:o.Corrupt] {
		corrupt[i] = true
	}
	type sample struct {
		jpg   []byte
		label int
		err   error
	}
	samples := make([]sample, o.Samples)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < o.Samples; i = int(next.Add(1) - 1) {
				rng := rand.New(rand.NewPCG(o.Seed, uint64(i)))
				w := o.MinSide + rng.IntN(o.MaxSide-o.MinSide+1)
				h := o.MinSide + rng.IntN(o.MaxSide-o.MinSide+1)
				label := rng.IntN(o.Classes)
				img, err := encodeJPEG(rng, w, h, label, o.Quality)
				if corrupt[i] {
					// Keep the JPEG header, cut the entropy-coded data: a
					// decoder gets far enough to fail, as on real bit rot.
					img = img[:len(img)/3]
				}
				samples[i] = sample{jpg: img, label: label, err: err}
			}
		}()
	}
	wg.Wait()

	bufs := make([]bytes.Buffer, o.Shards)
	ws := make([]*wds.Writer, o.Shards)
	out := make([]Shard, o.Shards)
	for s := range ws {
		ws[s] = wds.NewWriter(&bufs[s])
		out[s].Name = fmt.Sprintf("shard-%06d.tar", s)
	}
	for i, smp := range samples {
		if smp.err != nil {
			return nil, smp.err
		}
		s := i % o.Shards
		key := fmt.Sprintf("%08d", i)
		if corrupt[i] {
			out[s].Corrupt = append(out[s].Corrupt, key)
		}
		if err := ws[s].Write(wds.Sample{Key: key, Files: map[string][]byte{
			"jpg": smp.jpg, "cls": []byte(strconv.Itoa(smp.label)),
		}}); err != nil {
			return nil, err
		}
		out[s].Samples++
	}
	for s := range ws {
		if err := ws[s].Close(); err != nil {
			return nil, err
		}
		out[s].Data = bufs[s].Bytes()
	}
	return out, nil
}

// encodeJPEG draws smooth gradients with a class-coloured blob and noise:
// enough structure and entropy that decode cost resembles a photo's.
func encodeJPEG(rng *rand.Rand, w, h, label, quality int) ([]byte, error) {
	img := image.NewYCbCr(image.Rect(0, 0, w, h), image.YCbCrSubsampleRatio420)
	cx, cy := rng.IntN(w), rng.IntN(h)
	r2 := (w*w + h*h) / 16
	hue := uint8(label * 25)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			v := uint8((x*255)/w/2 + (y*255)/h/2)
			d := (x-cx)*(x-cx) + (y-cy)*(y-cy)
			if d < r2 {
				v = 255 - v
			}
			img.Y[img.YOffset(x, y)] = v + uint8(rng.IntN(24))
		}
	}
	for y := 0; y < (h+1)/2; y++ {
		for x := 0; x < (w+1)/2; x++ {
			i := y*img.CStride + x
			img.Cb[i] = hue + uint8(x/4)
			img.Cr[i] = 255 - hue + uint8(y/4)
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: quality}); err != nil {
		return nil, fmt.Errorf("encoding synthetic jpeg: %w", err)
	}
	return b.Bytes(), nil
}

// NoisyJPEG is a w x h 4:2:0 JPEG of gradients and noise, the same bytes
// every call: enough entropy that decoding it costs what a photo's does.
// Benchmarks of several packages share it so their figures compare.
func NoisyJPEG(w, h, quality int) ([]byte, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	img := image.NewYCbCr(image.Rect(0, 0, w, h), image.YCbCrSubsampleRatio420)
	for y := range h {
		for x := range w {
			img.Y[img.YOffset(x, y)] = uint8(x/3+y/3) + uint8(rng.IntN(24))
		}
	}
	for i := range img.Cb {
		img.Cb[i], img.Cr[i] = uint8(i/7), uint8(255-i/11)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: quality}); err != nil {
		return nil, fmt.Errorf("encoding noisy jpeg: %w", err)
	}
	return buf.Bytes(), nil
}
