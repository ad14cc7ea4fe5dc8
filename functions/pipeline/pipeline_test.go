package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	stdimage "image"
	stdpng "image/png"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/synth"
)

// samples reads a small synthetic shard; corrupt says which keys are broken.
func samples(t *testing.T, n, corrupt int) ([]wds.Sample, map[string]bool) {
	t.Helper()
	shards, err := synth.Images(synth.ImageOptions{Samples: n, Shards: 1, Seed: 3, MinSide: 40, MaxSide: 300, Quality: 85, Classes: 10, Corrupt: corrupt})
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]bool{}
	for _, k := range shards[0].Corrupt {
		bad[k] = true
	}
	r := wds.NewReader(bytes.NewReader(shards[0].Data), 0)
	var out []wds.Sample
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, bad
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
}

func lookup(t *testing.T, name string) Pipeline {
	t.Helper()
	p, err := Lookup(name, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != name {
		t.Fatalf("Lookup(%q).Name() = %q", name, p.Name())
	}
	return p
}

func TestImageNetOutputs(t *testing.T) {
	ss, _ := samples(t, 6, 0)
	for _, name := range []string{"imagenet-train", "imagenet-eval"} {
		p := lookup(t, name)
		for _, s := range ss {
			out, err := p.Process(s, SampleSeed(1, 0, s.Key))
			if err != nil {
				t.Fatalf("%s %s: %v", name, s.Key, err)
			}
			if out.Key != s.Key || len(out.Fields) != 2 {
				t.Fatalf("%s %s: output %q with %d fields", name, s.Key, out.Key, len(out.Fields))
			}
			img, lbl := out.Fields[0], out.Fields[1]
			if img.Name != "image" || img.DType != safetensors.U8 || !cmp.Equal(img.Shape, []int{224, 224, 3}) || len(img.Data) != 224*224*3 {
				t.Errorf("%s: image field %s %s%v with %d bytes", name, img.Name, img.DType, img.Shape, len(img.Data))
			}
			if lbl.Name != "label" || lbl.DType != safetensors.I64 || len(lbl.Shape) != 0 || len(lbl.Data) != 8 {
				t.Errorf("%s: label field %s %s%v with %d bytes", name, lbl.Name, lbl.DType, lbl.Shape, len(lbl.Data))
			}
			want := strings.TrimSpace(string(s.Files["cls"]))
			if got := int64(binary.LittleEndian.Uint64(lbl.Data)); want != strconv.FormatInt(got, 10) {
				t.Errorf("%s %s: label %d, cls member says %s", name, s.Key, got, want)
			}
		}
	}
}

func TestDeterminism(t *testing.T) {
	ss, _ := samples(t, 8, 0)
	train := lookup(t, "imagenet-train")
	// A second instance, as on another replica.
	other := lookup(t, "imagenet-train")
	differ := 0
	for _, s := range ss {
		seed := SampleSeed(42, 3, s.Key)
		a, err := train.Process(s, seed)
		if err != nil {
			t.Fatal(err)
		}
		b, err := other.Process(s, seed)
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(a, b) {
			t.Errorf("%s: same seed, different outputs", s.Key)
		}
		c, err := train.Process(s, SampleSeed(42, 4, s.Key))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Fields[0].Data, c.Fields[0].Data) {
			differ++
		}
	}
	if differ != len(ss) {
		t.Errorf("epochs 3 and 4 gave different train crops for %d of %d samples", differ, len(ss))
	}
	// Eval has no randomness: any seed gives the same pixels.
	eval := lookup(t, "imagenet-eval")
	a, err := eval.Process(ss[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := eval.Process(ss[0], 2)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(a, b) {
		t.Error("imagenet-eval output depends on the seed")
	}
}

func TestBadSamples(t *testing.T) {
	ss, bad := samples(t, 12, 3)
	good := ss[0]
	for _, s := range ss {
		if !bad[s.Key] {
			good = s
			break
		}
	}
	without := func(exts ...string) wds.Sample {
		s := wds.Sample{Key: good.Key, Files: map[string][]byte{}}
		for k, v := range good.Files {
			s.Files[k] = v
		}
		for _, e := range exts {
			delete(s.Files, e)
		}
		return s
	}
	with := func(ext string, v []byte) wds.Sample {
		s := without()
		s.Files[ext] = v
		return s
	}
	cases := []struct {
		name string
		s    wds.Sample
		want []string // substrings of the error
	}{
		{"no image", without("jpg"), []string{"no image member", "jpg, jpeg, png", "sample has cls"}},
		{"bad cls", with("cls", []byte("cat")), []string{"member cls", `"cat"`, "integer"}},
		{"empty", wds.Sample{Key: "x"}, []string{"no image member", "no members"}},
		{"not an image", with("jpg", []byte("GIF89a....")), []string{"member jpg", "unrecognised image format"}},
	}
	for _, c := range cases {
		for _, name := range []string{"imagenet-train", "imagenet-eval"} {
			_, err := lookup(t, name).Process(c.s, 1)
			if err == nil {
				t.Errorf("%s %s: no error", name, c.name)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s %s: error %q does not contain %q", name, c.name, err, w)
				}
			}
		}
	}
	// A sample without a cls member (a lone JPEG) is unlabelled: NoLabel.
	for _, name := range []string{"imagenet-train", "imagenet-eval"} {
		out, err := lookup(t, name).Process(without("cls"), 1)
		if err != nil {
			t.Errorf("%s without cls: %v", name, err)
			continue
		}
		f := out.Fields[len(out.Fields)-1]
		if got := int64(binary.LittleEndian.Uint64(f.Data)); f.Name != "label" || got != NoLabel {
			t.Errorf("%s without cls: last field %s = %d, want label %d", name, f.Name, got, NoLabel)
		}
	}
	// " 7\n" is a label (writers often add a newline).
	if _, err := lookup(t, "imagenet-train").Process(with("cls", []byte(" 7\n")), 1); err != nil {
		t.Errorf("cls with whitespace: %v", err)
	}
	// A png member serves when there is no jpg.
	var png bytes.Buffer
	if err := stdpng.Encode(&png, stdimage.NewGray(stdimage.Rect(0, 0, 300, 200))); err != nil {
		t.Fatal(err)
	}
	pngSample := without("jpg")
	pngSample.Files["png"] = png.Bytes()
	if _, err := lookup(t, "imagenet-train").Process(pngSample, 1); err != nil {
		t.Errorf("png sample: %v", err)
	}
	// synth's corrupt samples are truncated JPEGs.
	n := 0
	for _, s := range ss {
		if !bad[s.Key] {
			continue
		}
		n++
		_, err := lookup(t, "imagenet-train").Process(s, 1)
		if err == nil || !strings.Contains(err.Error(), "member jpg") {
			t.Errorf("corrupt %s: error %v, want one naming member jpg", s.Key, err)
		}
	}
	if n != 3 {
		t.Fatalf("found %d corrupt samples, want 3", n)
	}
	// A pixel limit below the images' size fails them, naming the limit.
	p, err := Lookup("imagenet-eval", Options{MaxPixels: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Process(good, 1); err == nil || !strings.Contains(err.Error(), "100-pixel limit") {
		t.Errorf("MaxPixels 100: error %v, want one naming the limit", err)
	}
}

func TestLookup(t *testing.T) {
	if diff := cmp.Diff([]string{"criteo", "imagenet-eval", "imagenet-train", "lm-pretrain", "text-wordpiece"}, Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	_, err := Lookup("resnet-magic", Options{})
	if err == nil || !strings.Contains(err.Error(), `"resnet-magic"`) || !strings.Contains(err.Error(), "criteo, imagenet-eval, imagenet-train, lm-pretrain, text-wordpiece") {
		t.Errorf("unknown pipeline: error %v, want one naming it and the known ones", err)
	}
	// A name with a colon is tried as a YAML document, which a lone word is not.
	_, err = Lookup("imagenet-train:v2", Options{})
	if err == nil || !strings.Contains(err.Error(), `unknown pipeline "imagenet-train:v2"`) {
		t.Errorf("unknown pipeline with a colon: error %v, want one naming it", err)
	}
}

func TestSampleSeed(t *testing.T) {
	// Pinned: changing the derivation silently changes every job's augmentations.
	if got := SampleSeed(1, 0, "00000001"); got != pinnedSeed {
		t.Errorf("SampleSeed(1, 0, \"00000001\") = %#x, want %#x", got, pinnedSeed)
	}
	seen := map[uint64]string{}
	for _, c := range []struct {
		seed  uint64
		epoch int
		key   string
	}{{1, 0, "00000001"}, {2, 0, "00000001"}, {1, 1, "00000001"}, {1, 0, "00000002"}, {0, 0, ""}, {1, 0, ""}, {0, 1, ""}, {1, -1, ""}} {
		s := SampleSeed(c.seed, c.epoch, c.key)
		id := fmt.Sprintf("(%d, %d, %q)", c.seed, c.epoch, c.key)
		if prev, dup := seen[s]; dup {
			t.Errorf("SampleSeed collides for %s and %s", prev, id)
		}
		seen[s] = id
	}
}

const pinnedSeed = 0x41c9b74e028c03f9
