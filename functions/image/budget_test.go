package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-project/sluice/internal/hostile"
)

// DecodeCost counts what the Go decoders hold per pixel, as measured on
// 4000x3000 images (TotalAlloc of one DecodeRegion, a fresh decoder):
// baseline 4:4:4 6 bytes, progressive 4:4:4 18, progressive gray 8; a
// 16-bit PNG 8 for its RGBA64 image and 3 for the RGB.
func TestDecodeCostFromTheHeader(t *testing.T) {
	for name, want := range map[string]int64{
		"baseline444.jpg":      200 * 150 * (3 + 3),
		"progressive.jpg":      200 * 150 * (3 + 4*3 + 3),
		"progressive_gray.jpg": 200 * 150 * (1 + 4 + 3),
		"cmyk.jpg":             64 * 48 * (4 + 3),
	} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeCost(data); got != want || err != nil {
			t.Errorf("DecodeCost(%s) = %d, %v; want %d", name, got, err, want)
		}
	}
	if got, err := DecodeCost(hostile.PNG16(300, 200)); got != 300*200*(8+3) || err != nil {
		t.Errorf("DecodeCost(16-bit PNG) = %d, %v; want %d", got, err, 300*200*(8+3))
	}
	if _, err := DecodeCost([]byte("GIF89a")); err == nil {
		t.Error("DecodeCost(GIF) = nil error")
	}
}

func TestBudgetRefusesWhatCanNeverFit(t *testing.T) {
	b := NewBudget(100 << 20)
	_, err := b.Reserve(context.Background(), 671<<20)
	var ob *OverBudgetError
	if !errors.As(err, &ob) || err.Error() != "decoding takes 671.0 MiB, over the 100.0 MiB decode budget" {
		t.Fatalf("Reserve(over the budget) = %v", err)
	}
}

func TestBudgetWaitsForRoom(t *testing.T) {
	b := NewBudget(100)
	first, err := b.Reserve(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	// No room for a second: it waits, here until its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error)
	go func() {
		_, err := b.Reserve(ctx, 60)
		waited <- err
	}()
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve with no room = %v, want it to wait until its context is cancelled", err)
	}
	// Room given back is taken by the next waiter.
	got := make(chan func())
	go func() {
		release, err := b.Reserve(context.Background(), 60)
		if err != nil {
			t.Error(err)
		}
		got <- release
	}()
	first()
	second := <-got
	if b.InUse() != 60 {
		t.Fatalf("InUse = %d with one reservation of 60", b.InUse())
	}
	second()
	if release, err := b.Reserve(context.Background(), 100); err != nil {
		t.Fatalf("the whole budget after both released: %v", err)
	} else {
		release()
	}
}

func TestNilBudgetBoundsNothing(t *testing.T) {
	var b *Budget
	release, err := b.Reserve(context.Background(), 1<<40)
	if err != nil || b.Total() != 0 {
		t.Fatal(err)
	}
	release()
}
