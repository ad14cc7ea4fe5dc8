package sat

import (
	"math"
	"testing"
)

func TestAddHoldsAtTheBounds(t *testing.T) {
	for _, c := range []struct{ a, b, want int }{
		{1, 2, 3},
		{math.MaxInt, 1, math.MaxInt},
		{1 << 62, 1 << 62, math.MaxInt},
		{math.MinInt, -1, math.MinInt},
		{-5, 3, -2},
		{math.MaxInt, math.MinInt, -1},
	} {
		if got := Add(c.a, c.b); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Add64(int64(c.a), int64(c.b)); got != int64(c.want) {
			t.Errorf("Add64(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	if got := Sum(1<<62, 1<<62, -7, 3); got != math.MaxInt {
		t.Errorf("Sum over the range = %d, want MaxInt", got)
	}
	if got := Sum(2, -7, 3); got != 5 {
		t.Errorf("Sum(2, -7, 3) = %d, want 5", got)
	}
}
