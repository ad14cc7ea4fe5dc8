package pipeline

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/internal/hostile"
)

func png16Sample(data []byte) wds.Sample {
	return wds.Sample{Key: "k", Files: map[string][]byte{"png": data, "cls": []byte("1")}}
}

// A 16-bit PNG counts at what decoding it really takes (8 bytes a pixel
// for Go's RGBA64 image, then 3 for the RGB): one whose decoding alone is
// over the budget fails its sample, naming its size, before any pixel is
// decoded.
func TestImageOverTheDecodeBudgetFailsNamingItsSize(t *testing.T) {
	budget := image.NewBudget(32 << 20)
	p, err := Lookup("imagenet-eval", Options{DecodeBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Process(png16Sample(hostile.PNG16(2000, 2000)), 1)
	var ob *image.OverBudgetError
	want := "member png: 2000x2000 image: decoding takes 42.0 MiB, over the 32.0 MiB decode budget"
	if !errors.As(err, &ob) || err.Error() != want {
		t.Fatalf("Process = %v, want %q", err, want)
	}
	// One that fits is decoded, and its reservation given back.
	if _, err := p.Process(png16Sample(hostile.PNG16(1000, 1000)), 1); err != nil {
		t.Fatal(err)
	}
	if budget.InUse() != 0 {
		t.Fatalf("%d bytes of the budget still reserved after the samples", budget.InUse())
	}
}

// An image that fits the budget but not what is left of it waits for
// room, as long as its caller's context lasts.
func TestImageWaitsForRoomInTheDecodeBudget(t *testing.T) {
	budget := image.NewBudget(32 << 20)
	p, err := Lookup("imagenet-eval", Options{DecodeBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	held, err := budget.Reserve(context.Background(), 30<<20) // another sample's decode
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := p.ProcessContext(ctx, png16Sample(hostile.PNG16(1000, 1000)), 1) // 10.5 MiB
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("ProcessContext with no room in the budget = %v, want it to wait until cancelled", err)
	}
	held()
	if _, err := p.ProcessContext(context.Background(), png16Sample(hostile.PNG16(1000, 1000)), 1); err != nil {
		t.Fatalf("with room again: %v", err)
	}
}
