package retry

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	ms := time.Millisecond
	b := Startup()
	for _, c := range []struct {
		attempt int
		jitter  float64
		want    time.Duration
	}{
		{-1, 0, 250 * ms},
		{0, 0, 250 * ms},
		{1, 0, 250 * ms},
		{2, 0, 500 * ms},
		{3, 0, time.Second},
		{6, 0, 8 * time.Second},
		{7, 0, 10 * time.Second},
		{1 << 30, 0, 10 * time.Second},
		// Jitter takes up to half away.
		{1, 1, 125 * ms},
		{3, 0.5, 750 * ms},
		{20, 1, 5 * time.Second},
		// A draw out of [0, 1) is clamped.
		{2, -3, 500 * ms},
		{2, 7, 250 * ms},
	} {
		if got := b.Delay(c.attempt, c.jitter); got != c.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", c.attempt, c.jitter, got, c.want)
		}
	}
}
