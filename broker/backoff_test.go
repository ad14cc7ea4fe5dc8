package broker

import (
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{
		{-1, 250 * ms},
		{0, 250 * ms},
		{1, 250 * ms},
		{2, 500 * ms},
		{3, time.Second},
		{4, 2 * time.Second},
		{5, 4 * time.Second},
		{6, 8 * time.Second},
		{7, 10 * time.Second},
		{20, 10 * time.Second},
		{1 << 30, 10 * time.Second},
	} {
		if got := RetryDelay(c.attempt); got != c.want {
			t.Errorf("RetryDelay(%d) = %v, want %v", c.attempt, got, c.want)
		}
	}
}
