package knative

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShareReady(t *testing.T) {
	cases := []struct {
		name      string
		requested map[string]int
		ready     int
		want      map[string]int
	}{
		{"nothing ready", map[string]int{"a": 2}, 0, map[string]int{"a": 0}},
		{"all ready", map[string]int{"a": 2, "b": 3}, 5, map[string]int{"a": 2, "b": 3}},
		{"more ready than requested: none over", map[string]int{"a": 2}, 7, map[string]int{"a": 2}},
		{"proportional", map[string]int{"a": 2, "b": 6}, 4, map[string]int{"a": 1, "b": 3}},
		{"remainder to the largest fraction", map[string]int{"a": 1, "b": 2}, 2, map[string]int{"a": 1, "b": 1}},
		{"tie in name order", map[string]int{"b": 1, "a": 1}, 1, map[string]int{"a": 1, "b": 0}},
		{"zero requested gets none", map[string]int{"a": 0, "b": 2}, 1, map[string]int{"a": 0, "b": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ShareReady(c.requested, c.ready)
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("(-want,+got)\n%s", d)
			}
			sum := 0
			for _, n := range got {
				sum += n
			}
			if sum > c.ready {
				t.Errorf("shared %d of %d ready", sum, c.ready)
			}
		})
	}
}

func TestFloor(t *testing.T) {
	if got := Floor(map[string]int{"a": 2, "b": 3, "c": -1}, 0); got != 5 {
		t.Errorf("Floor without max = %d, want 5", got)
	}
	if got := Floor(map[string]int{"a": 2, "b": 3}, 4); got != 4 {
		t.Errorf("Floor capped = %d, want 4", got)
	}
	if got := Floor(nil, 4); got != 0 {
		t.Errorf("Floor of none = %d, want 0", got)
	}
}
