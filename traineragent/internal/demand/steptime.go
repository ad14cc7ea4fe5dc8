package demand

import (
	"math"
	"slices"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// StepReport is what a rank's client sends with each batch request: totals
// since the client process started, so that a retried request counts once.
// WaitS is time the training loop spent blocked waiting for a batch;
// ComputeS is the time between handing a batch to the loop and asking for
// the next one. Steps counts the batches the loop took.
type StepReport struct {
	Rank     int
	Steps    int64
	WaitS    float64
	ComputeS float64
}

// Valid reports whether r can be a client's totals.
func (r StepReport) Valid() bool {
	finite := func(x float64) bool { return x >= 0 && !math.IsInf(x, 1) } // NaN fails x >= 0
	return r.Rank >= 0 && r.Steps >= 0 && finite(r.WaitS) && finite(r.ComputeS)
}

// covers reports whether r is at or past o on every total: the same client
// process, later on (or the same report again).
func (r StepReport) covers(o StepReport) bool {
	return r.Steps >= o.Steps && r.WaitS >= o.WaitS && r.ComputeS >= o.ComputeS
}

// StepDelta is what a rank did between two of its reports.
type StepDelta struct {
	Steps    int64
	WaitS    float64
	ComputeS float64
}

func since(r, o StepReport) StepDelta {
	return StepDelta{r.Steps - o.Steps, r.WaitS - o.WaitS, r.ComputeS - o.ComputeS}
}

func (d StepDelta) zero() bool { return d == StepDelta{} }

func (d *StepDelta) add(o StepDelta) {
	d.Steps += o.Steps
	d.WaitS += o.WaitS
	d.ComputeS += o.ComputeS
}

// StepParts is a stretch of a rank's steps split as wire.StepTimes splits
// a step: data wait, GPU compute and the rest, in seconds.
type StepParts struct {
	Steps                   int64
	WaitS, ComputeS, OtherS float64
}

func (p *StepParts) add(o StepParts) {
	p.Steps += o.Steps
	p.WaitS += o.WaitS
	p.ComputeS += o.ComputeS
	p.OtherS += o.OtherS
}

// splitCompute splits d's compute time by what the GPU did: busyS is the
// time the GPU was busy in the window d fell in, negative when no GPU is
// read. The GPU idles while the loop waits for a batch (the premise of the
// stall signal too), so its busy time falls within the compute time: the
// busy share of the compute is min(1, busy/compute), and the rest of the
// compute is host work with the GPU idle. Without a GPU reading all of it
// counts as compute.
func splitCompute(d StepDelta, busyS float64) StepParts {
	p := StepParts{Steps: d.Steps, WaitS: d.WaitS, ComputeS: d.ComputeS}
	if busyS >= 0 {
		p.ComputeS = min(d.ComputeS, busyS)
		p.OtherS = d.ComputeS - p.ComputeS
	}
	return p
}

// rankSteps follows one rank's reports.
type rankSteps struct {
	last StepReport // the newest report that counted
	// behind is the latest report that was behind last and did not count:
	// a stale copy of an earlier request, or a restarted client's first.
	behind    StepReport
	hasBehind bool
	window    StepDelta // counted in the current demand window
	total     StepParts // in the windows closed so far
}

// advance applies a report of the rank and returns what it adds. A report
// counts only against an earlier one of the same client process, so that
// nothing counts twice or negative:
//   - at or past the newest (covers it): the difference; a retried
//     request adds nothing, or the wait it added while retrying;
//   - behind the newest: nothing, since it is a request that arrived out
//     of order or a client that restarted from zero; the report after it
//     tells which: one that goes on from it, still behind the newest, is
//     the restarted client's (a rank asks for one batch at a time, so two
//     stale copies in a row do not happen), and counts from it.
//
// A restarted client's first report, and a rank's first report to this
// agent (its client may have run long before this agent started), only
// set where counting starts.
func (s *rankSteps) advance(r StepReport) StepDelta {
	switch {
	case r.covers(s.last):
		d := since(r, s.last)
		s.last, s.hasBehind = r, false
		return d
	case s.hasBehind && r.covers(s.behind) && r != s.behind:
		d := since(r, s.behind)
		s.last, s.hasBehind = r, false
		return d
	default:
		s.behind, s.hasBehind = r, true
		return StepDelta{}
	}
}

// StepBook keeps the step reports of every rank the agent serves; the
// Agent's mu guards it.
type StepBook struct {
	ranks map[int]*rankSteps
	// reporting is set by the first report with a total above zero: a
	// client that does not measure its steps may still send zeros, and
	// its wait must not read as "never waits".
	reporting bool
}

// Report applies r (valid) and returns what it adds.
func (b *StepBook) Report(r StepReport) StepDelta {
	if r.Steps > 0 || r.WaitS > 0 || r.ComputeS > 0 {
		b.reporting = true
	}
	s, ok := b.ranks[r.Rank]
	if !ok {
		if b.ranks == nil {
			b.ranks = map[int]*rankSteps{}
		}
		b.ranks[r.Rank] = &rankSteps{last: r}
		return StepDelta{}
	}
	d := s.advance(r)
	s.window.add(d)
	return d
}

// ClientWindow is what the ranks' step reports say of one demand window.
type ClientWindow struct {
	// Reporting is set once any rank reported totals above zero: the
	// clients' wait then stands for the trainer's, not the agent's
	// blocked time.
	Reporting bool
	// Reported is set when some rank's report in the window added to its
	// totals.
	Reported bool
	// MaxWait is the most wait one rank reported in the window. DDP ranks
	// step together, so the rank fed last holds up every other: the
	// trainer stalls while any rank waits, which the longest wait bounds
	// from below.
	MaxWait time.Duration
	// Times is the window's mean step over every rank's steps in it.
	Times wire.StepTimes
	// PerRank has the split of each rank that reported in the window.
	PerRank map[int]StepParts
}

// CloseWindow ends a demand window of length interval in which the GPU was
// busy the share gpu (negative: no GPU read): it splits each rank's
// window (splitCompute), adds it to the rank's totals and starts the
// next window.
func (b *StepBook) CloseWindow(interval time.Duration, gpu float64) ClientWindow {
	c := ClientWindow{Reporting: b.reporting}
	busyS := -1.0
	if gpu >= 0 {
		busyS = gpu * max(interval, 0).Seconds()
	}
	var sum StepParts
	for rank, s := range b.ranks {
		if s.window.zero() {
			continue
		}
		p := splitCompute(s.window, busyS)
		s.total.add(p)
		s.window = StepDelta{}
		if c.PerRank == nil {
			c.PerRank = map[int]StepParts{}
		}
		c.PerRank[rank] = p
		c.Reported = true
		c.MaxWait = max(c.MaxWait, time.Duration(p.WaitS*float64(time.Second)))
		sum.add(p)
		if p.Steps > 0 {
			c.Times.Ranks++
		}
	}
	if sum.Steps > 0 {
		n := float64(sum.Steps)
		c.Times.Steps = sum.Steps
		c.Times.WaitS, c.Times.ComputeS, c.Times.OtherS = sum.WaitS/n, sum.ComputeS/n, sum.OtherS/n
	}
	return c
}

// RankSteps is one rank's step times since the agent started, as of the
// last demand signal (Stats.Steps; GET /v1/stats "steps").
type RankSteps struct {
	Rank     int     `json:"rank"`
	Steps    int64   `json:"steps"`
	WaitS    float64 `json:"wait_s"`
	ComputeS float64 `json:"compute_s"`
	OtherS   float64 `json:"other_s"`
}

// Totals lists every rank's totals by rank.
func (b *StepBook) Totals() []RankSteps {
	out := make([]RankSteps, 0, len(b.ranks))
	for rank, s := range b.ranks {
		t := s.total
		out = append(out, RankSteps{Rank: rank, Steps: t.Steps, WaitS: t.WaitS, ComputeS: t.ComputeS, OtherS: t.OtherS})
	}
	slices.SortFunc(out, func(a, b RankSteps) int { return a.Rank - b.Rank })
	return out
}
