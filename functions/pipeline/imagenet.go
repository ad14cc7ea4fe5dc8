package pipeline

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/internal/safetensors"
	"github.com/sluice-project/sluice/internal/wds"
)

// ImageNet recipe constants, as in torchvision's reference training scripts.
const (
	CropSize   = 224
	EvalResize = 256
	FlipProb   = 0.5
)

type imageNet struct {
	name      string
	train     bool
	maxPixels int
	// decoded holds *image.RGB source buffers between samples: a decoded
	// image is up to MaxPixels*3 bytes and is garbage right after resizing.
	decoded sync.Pool
}

func newImageNet(name string, o Options, train bool) *imageNet {
	return &imageNet{name: name, train: train, maxPixels: o.MaxPixels,
		decoded: sync.Pool{New: func() any { return &image.RGB{} }}}
}

func (p *imageNet) Name() string { return p.name }

func (p *imageNet) Process(s wds.Sample, seed uint64) (Output, error) {
	data, member, err := imageMember(s)
	if err != nil {
		return Output{}, err
	}
	label, err := classLabel(s)
	if err != nil {
		return Output{}, err
	}
	src := p.decoded.Get().(*image.RGB)
	defer p.decoded.Put(src)
	if err := image.DecodeInto(src, data, p.maxPixels); err != nil {
		return Output{}, fmt.Errorf("member %s: %w", member, err)
	}
	out := image.NewRGB(CropSize, CropSize)
	if p.train {
		rng := newRand(seed)
		r := image.RandomResizedCrop(rng, src.W, src.H, image.DefaultScale, image.DefaultRatio)
		if err := image.ResizeInto(out, src, r); err != nil {
			return Output{}, fmt.Errorf("member %s: %w", member, err)
		}
		if rng.Float64() < FlipProb {
			image.FlipHorizontal(out)
		}
	} else {
		w, h := image.ShorterSide(src.W, src.H, EvalResize)
		resized := p.decoded.Get().(*image.RGB)
		defer p.decoded.Put(resized)
		resized.Reset(w, h)
		if err := image.ResizeInto(resized, src, src.Bounds()); err != nil {
			return Output{}, fmt.Errorf("member %s: %w", member, err)
		}
		if err := image.Crop(out, resized, image.CenterCrop(w, h, CropSize, CropSize)); err != nil {
			return Output{}, fmt.Errorf("member %s: %w", member, err)
		}
	}
	lb := make([]byte, 8)
	binary.LittleEndian.PutUint64(lb, uint64(label))
	return Output{Key: s.Key, Fields: []Field{
		{Name: "image", DType: safetensors.U8, Shape: []int{CropSize, CropSize, 3}, Data: out.Pix},
		{Name: "label", DType: safetensors.I64, Shape: []int{}, Data: lb},
	}}, nil
}

func imageMember(s wds.Sample) ([]byte, string, error) {
	// The members read as the image, in order of preference.
	imageMembers := []string{"jpg", "jpeg", "png"}
	for _, m := range imageMembers {
		if b, ok := s.Files[m]; ok {
			return b, m, nil
		}
	}
	return nil, "", fmt.Errorf("no image member (want one of %s; sample has %s)",
		strings.Join(imageMembers, ", "), describeMembers(s))
}

// classLabel reads the "cls" member: an ASCII integer, surrounding
// whitespace allowed (WebDataset writers often add a newline).
func classLabel(s wds.Sample) (int64, error) {
	b, ok := s.Files["cls"]
	if !ok {
		return 0, fmt.Errorf("no cls member (sample has %s)", describeMembers(s))
	}
	txt := strings.TrimSpace(string(b))
	v, err := strconv.ParseInt(txt, 10, 64)
	if err != nil {
		if len(txt) > 32 {
			txt = txt[:32] + "..."
		}
		return 0, fmt.Errorf("member cls %q: want an integer class label", txt)
	}
	return v, nil
}

func describeMembers(s wds.Sample) string {
	if len(s.Files) == 0 {
		return "no members"
	}
	return strings.Join(slices.Sorted(maps.Keys(s.Files)), ", ")
}
