package broker

import "testing"

func TestOutputFullCountsWhatIsOnItsWay(t *testing.T) {
	const hw = 192 << 10
	for _, c := range []struct {
		name                   string
		stream, since, perTask int64
		inflight               int
		highWater              int64
		want                   bool
	}{
		{"no high water", 1 << 30, 0, 0, 5, 0, false},
		{"stream below", 100 << 10, 0, 0, 0, hw, false},
		{"stream at high water", hw, 0, 0, 0, hw, true},
		{"done since the read fill it", 100 << 10, 92 << 10, 0, 0, hw, true},
		{"a send in flight fills it", 100 << 10, 32 << 10, 60 << 10, 1, hw, true},
		{"a send in flight still fits", 100 << 10, 0, 60 << 10, 1, hw, false},
		{"rate unknown: in flight counts nothing", 100 << 10, 0, 0, 3, hw, false},
	} {
		if got := outputFull(c.stream, c.since, c.perTask, c.inflight, c.highWater); got != c.want {
			t.Errorf("%s: outputFull(%d, %d, %d, %d, %d) = %v, want %v", c.name, c.stream, c.since, c.perTask, c.inflight, c.highWater, got, c.want)
		}
	}
}
