package planner

import (
	"math"
	"testing"
	"time"
)

func TestLearn(t *testing.T) {
	at := time.Unix(100, 0)
	r := Learn(Rate{}, Observation{Job: "a", PerReplica: 300, ReplicaSeconds: 60, At: at})
	if r.PerReplica != 300 || r.Observations != 1 || r.Job != "a" || r.ReplicaSeconds != 60 {
		t.Fatalf("first observation: %+v, want it taken as it is", r)
	}
	// One half-life of new evidence weighs as much as all before.
	r = Learn(r, Observation{Job: "b", PerReplica: 100, ReplicaSeconds: HalfLife, At: at})
	if math.Abs(r.PerReplica-200) > 1e-9 || r.Observations != 2 || r.Job != "b" {
		t.Fatalf("after a half-life at 100/s: %+v, want 200/s", r)
	}
	// A little evidence moves it a little.
	r = Learn(r, Observation{PerReplica: 1000, ReplicaSeconds: 6})
	if r.PerReplica < 200 || r.PerReplica > 210 {
		t.Fatalf("after 6 replica-seconds at 1000/s: %.1f, want within 200..210", r.PerReplica)
	}
	for _, o := range []Observation{{PerReplica: 0, ReplicaSeconds: 10}, {PerReplica: 10}, {PerReplica: math.NaN(), ReplicaSeconds: 1}, {PerReplica: math.Inf(1), ReplicaSeconds: 1}} {
		if got := Learn(r, o); got != r {
			t.Errorf("Learn(%+v) changed the rate to %+v", o, got)
		}
	}
}

func TestReplicasFor(t *testing.T) {
	for _, tc := range []struct {
		trainer, per float64
		want         int
	}{
		{1000, 300, 4}, {900, 300, 3}, {1, 300, 1}, {0, 300, 0}, {1000, 0, 0}, {-5, 10, 0}, {math.NaN(), 1, 0},
	} {
		if got := ReplicasFor(tc.trainer, tc.per); got != tc.want {
			t.Errorf("ReplicasFor(%v, %v) = %d, want %d", tc.trainer, tc.per, got, tc.want)
		}
	}
}

func TestKeys(t *testing.T) {
	all, on := Keys("imagenet-train", "s3://b/train/")
	if all != "p.imagenet-train" || on == "" || on[:len(all)+1] != all+"." {
		t.Errorf("Keys = %q, %q", all, on)
	}
	spec, _ := Keys("ops:\n  - decode: {}\n", "")
	if spec[:7] != "p.spec-" {
		t.Errorf("an inline spec's key %q, want p.spec-<hash>", spec)
	}
	if _, on := Keys("x", ""); on != "" {
		t.Errorf("no dataset: key %q, want none", on)
	}
}
