package demo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/wire"
)

func TestSummaryProblems(t *testing.T) {
	bad := wire.FailedSample{Epoch: 0, Key: "shard-000001/00000000", Reason: "no image member (want one of jpg, jpeg, png; sample has jsonl)"}
	for _, tc := range []struct {
		name string
		s    Summary
		want []string
	}{
		{"all delivered", Summary{SamplesExpected: 10, SamplesDelivered: 10}, nil},
		{"some failed", Summary{SamplesExpected: 10, SamplesDelivered: 9, FailedSamples: []wire.FailedSample{bad}}, nil},
		{"nothing preprocessed", Summary{SamplesExpected: 2, FailedSamples: []wire.FailedSample{bad, bad}},
			[]string{"no sample could be preprocessed: 2 of 2 samples failed; the first, epoch 0 sample shard-000001/00000000: no image member (want one of jpg, jpeg, png; sample has jsonl)"}},
		{"shards failed", Summary{SamplesExpected: 2, FailedShards: []wire.FailedSample{{Key: "a.tar", Reason: "shard not found"}}},
			[]string{"no sample could be preprocessed: 1 shard tasks failed; the first, shard a.tar: shard not found"}},
		{"silence", Summary{SamplesExpected: 2, Lost: 2},
			[]string{"no sample could be preprocessed: 0 of 2 samples delivered and no failure reported", "2 samples lost (neither delivered nor reported as failed)"}},
		{"duplicates and replicas", Summary{SamplesExpected: 2, SamplesDelivered: 3, Duplicates: 1, ReplicasFinal: 1},
			[]string{"1 samples delivered more than once", "1 replicas still running at the end"}},
	} {
		if diff := cmp.Diff(tc.want, tc.s.Problems()); diff != "" {
			t.Errorf("%s: problems (-want +got):\n%s", tc.name, diff)
		}
		var b bytes.Buffer
		tc.s.Job = "demo"
		tc.s.WriteText(&b)
		verdict := "job demo: OK"
		if tc.want != nil {
			verdict = "job demo: FAILED\n  problem      " + tc.want[0]
		}
		if !strings.Contains(b.String(), verdict) {
			t.Errorf("%s: text lacks %q:\n%s", tc.name, verdict, b.String())
		}
	}
}
