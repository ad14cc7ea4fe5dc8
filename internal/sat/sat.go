// Package sat adds counts that come from outside the process (shard
// results, demand signals, a stored status) without wrapping: a sum past
// the type's range stays at its bound, so a forged count cannot turn a
// total negative.
package sat

import "math"

// Add is a+b, held within [math.MinInt, math.MaxInt].
func Add(a, b int) int {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt
	case b < 0 && s > a:
		return math.MinInt
	}
	return s
}

// Add64 is a+b, held within [math.MinInt64, math.MaxInt64].
func Add64(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}

// Sum adds up non-negative counts: each below zero counts as zero, the
// total held at math.MaxInt.
func Sum(counts ...int) int {
	t := 0
	for _, c := range counts {
		t = Add(t, max(c, 0))
	}
	return t
}
