package pipeline

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/synth"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
)

// benchJPEG is the shared 400x300 quality-90 benchmark JPEG (the image
// package's benchmarks decode the same bytes).
func benchJPEG(b *testing.B) []byte {
	data, err := synth.NoisyJPEG(400, 300, 90)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

const benchText = "Sluice preprocesses samples in serverless functions that scale with the trainer's demand, " +
	"so that accelerators never wait for data. Each replica streams a shard, decodes and augments every sample, " +
	"and publishes chunks that the trainer agent re-batches."

func benchCriteo() []byte {
	cols := []string{"1", "1", "", "5", "0", "1382", "4", "15", "2", "181", "1", "2", "", "2"}
	for i := range 26 {
		cols = append(cols, []string{"68fd1e64", "80e26c9b", "fb936136", ""}[i%4])
	}
	return []byte(strings.Join(cols, "\t"))
}

// BenchmarkOp times each registered op on one sample, apart from the
// others. Image ops start from what they would get in imagenet-train or
// -eval: "from encoded" variants include decoding (only the region the op
// reads; whole and at full scale in the pure-Go build), "decoded" ones
// start from 400x300 pixels, the per-pixel ops from a 224x224 crop.
func BenchmarkOp(b *testing.B) {
	data := benchJPEG(b)
	decoded, err := image.Decode(data, 0)
	if err != nil {
		b.Fatal(err)
	}
	crop, err := image.Resize(decoded, decoded.Bounds(), 224, 224)
	if err != nil {
		b.Fatal(err)
	}
	sample := wds.Sample{Key: "bench", Files: map[string][]byte{"jpg": data, "cls": []byte("3"),
		"txt": []byte(benchText), "jsonl": []byte(`{"text": "` + benchText + `"}`), "tsv": benchCriteo()}}
	encoded := func(st *state) {
		st.encoded, st.enc, st.member, st.srcW, st.srcH, st.img = true, data, "jpg", 400, 300, nil
	}
	pixels := func(m *image.RGB) func(st *state) {
		return func(st *state) {
			if st.decodeBuf.W != m.W {
				st.decodeBuf = image.RGB{W: m.W, H: m.H, Pix: bytes.Clone(m.Pix)}
			}
			st.encoded, st.img = false, &st.decodeBuf
		}
	}
	var textIn func(st *state)
	for _, c := range []struct {
		name   string
		op     string
		params map[string]any
		prep   func(st *state)
	}{
		{"decode", "decode", nil, func(*state) {}},
		{"decode+to_uint8_hwc/full_400x300", "", nil, nil},
		{"random_resized_crop/from_encoded", "random_resized_crop", nil, encoded},
		{"random_resized_crop/decoded", "random_resized_crop", nil, pixels(decoded)},
		{"resize/from_encoded", "resize", nil, encoded},
		{"resize/decoded", "resize", nil, pixels(decoded)},
		{"center_crop/from_encoded", "center_crop", nil, encoded},
		{"center_crop/decoded", "center_crop", nil, pixels(decoded)},
		{"random_horizontal_flip", "random_horizontal_flip", map[string]any{"p": 1.0}, pixels(crop)},
		{"color_jitter", "color_jitter", map[string]any{"brightness": 0.4, "contrast": 0.4, "saturation": 0.4}, pixels(crop)},
		{"normalize/f32", "normalize", nil, pixels(crop)},
		{"normalize/f16", "normalize", map[string]any{"dtype": "f16"}, pixels(crop)},
		{"to_uint8_hwc", "to_uint8_hwc", nil, pixels(crop)},
		{"text/txt", "text", nil, func(*state) {}},
		{"text/jsonl", "text", map[string]any{"source": "jsonl"}, func(st *state) { st.json = nil }},
		{"wordpiece/pad128", "wordpiece", nil, textIn},
		{"wordpiece/pack128", "wordpiece", map[string]any{"mode": "pack"}, textIn},
		{"criteo", "criteo", nil, func(*state) {}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.op == "" {
				// Decoding on its own: what the lazy decode defers.
				p, err := Build(Definition{Ops: []OpCall{{Op: "decode"}, {Op: "to_uint8_hwc"}}}, Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := p.Process(sample, 1); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			spec, _ := LookupOp(c.op)
			params, bad := resolveParams(spec, OpCall{Op: c.op, Params: c.params}, func(_ int, f string, a ...any) { b.Fatalf(f, a...) })
			if bad {
				b.Fatal("bad params")
			}
			stg, err := spec.build(params, Options{})
			if err != nil {
				b.Fatal(err)
			}
			prep := c.prep
			if prep == nil { // wordpiece: the text op's output
				prep = func(st *state) { st.text = benchText }
			}
			st := newState()
			st.start(context.Background(), sample, 1, 0, nil, false)
			b.ReportAllocs()
			for b.Loop() {
				prep(st)
				st.fields = st.fields[:0]
				if err := stg.apply(st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProcess is one sample end to end through each built-in: the
// 400x300 JPEG for the image pipelines, a sentence, a Criteo line.
func BenchmarkProcess(b *testing.B) {
	data := benchJPEG(b)
	sample := wds.Sample{Key: "bench", Files: map[string][]byte{"jpg": data, "cls": []byte("3"),
		"txt": []byte(benchText), "tsv": benchCriteo()}}
	for _, name := range append(Names(), "augment-f16") {
		if name == LMPretrain {
			continue // needs a tokenizer.json: BenchmarkTokenizeAndPack
		}
		b.Run(name, func(b *testing.B) {
			var p Pipeline
			var err error
			if name == "augment-f16" {
				p, err = Lookup(augmentSpec, Options{})
			} else {
				p, err = Lookup(name, Options{})
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := uint64(0)
			for b.Loop() {
				if _, err := p.Process(sample, SampleSeed(1, 0, "bench")+i); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
