package integration

import (
	"testing"
	"time"
)

func TestReportCountsByKey(t *testing.T) {
	tr := NewTrainer()
	// Epoch 0: a, b once, c twice; epoch 1: a, c; b failed; x unexpected.
	for _, ek := range []string{"0/a", "0/b", "0/c", "0/c", "1/a", "1/c", "1/x"} {
		tr.seen[ek]++
	}
	tr.failed["1/b"] = "corrupt jpeg"
	r := tr.Check("unit", []string{"a", "b", "c"}, 2, []string{"b"}, time.Second)
	if r.Expected != 6 || r.Delivered != 5 || r.Failed != 1 || r.Lost != 0 || r.Duplicates != 1 || r.Unexpected != 1 {
		t.Fatalf("%+v", r)
	}
	if r.Err() == nil {
		t.Fatal("a duplicate and an unexpected key passed the check")
	}
	if got, want := r.Line(), "scenario=unit expected=6 delivered=5 lost=0 duplicates=1 failed=1 seconds=1.0"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	delete(tr.failed, "1/b")
	if r := tr.Check("unit", []string{"a", "b", "c"}, 2, nil, 0); r.Lost != 1 || r.LostKeys[0] != "1/b" {
		t.Fatalf("lost: %+v", r)
	}
}
