package traineragent

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// TestFailedSamplesAreListedWithinABound: a reader lists the first
// MaxFailedSamplesListed failures, each cut to wire.MaxReasonBytes, and
// counts the rest, whatever number of failures it is told of.
func TestFailedSamplesAreListedWithinABound(t *testing.T) {
	job := fixture.Job("j", 1, 4, fixture.Layout{})
	r := newReader(job, wire.DefaultReader, Options{}, slog.New(slog.DiscardHandler), NewMetrics(nil))
	const reported = 3 * readerstate.MaxFailedSamplesListed
	huge := strings.Repeat("x", 1<<20)
	for i := range reported {
		r.Fail(fmt.Sprintf("k%d", i), huge)
	}
	s := r.Stats()
	if len(s.FailedSamples) != readerstate.MaxFailedSamplesListed || s.FailedSamplesOmitted != reported-readerstate.MaxFailedSamplesListed {
		t.Fatalf("%d failures listed, %d omitted; want %d and %d", len(s.FailedSamples), s.FailedSamplesOmitted,
			readerstate.MaxFailedSamplesListed, reported-readerstate.MaxFailedSamplesListed)
	}
	if f := s.FailedSamples[0]; f.Key != "k0" || len(f.Reason) > wire.MaxReasonBytes+3 {
		t.Errorf("first failure %s with a reason of %d bytes, want k0's, cut to %d", f.Key, len(f.Reason), wire.MaxReasonBytes)
	}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Omitted int64 `json:"failed_samples_omitted"`
	}
	if err := json.Unmarshal(data, &got); err != nil || got.Omitted != reported-readerstate.MaxFailedSamplesListed {
		t.Errorf("stats JSON says %d omitted (%v), want %d", got.Omitted, err, reported-readerstate.MaxFailedSamplesListed)
	}
	if len(data) > 2*readerstate.MaxFailedSamplesListed*wire.MaxReasonBytes {
		t.Errorf("stats JSON of %d bytes", len(data))
	}
}
