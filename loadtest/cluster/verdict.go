package cluster

import (
	"fmt"
	"math"
	"sort"

	"github.com/sluice-project/sluice/loadtest/trace"
)

// Verdict sets one Sluice run beside the baselines a platform could run
// instead: those with independent trials (no platform shares a sweep's
// preprocessing without Sluice) and those with the run's own sharing (the
// policy alone differs).
type Verdict struct {
	Sluice RunResult
	// AtCost is the best such baseline at equal or fewer reserved
	// core-hours, with its stall; AtCostFound is false when none reserved
	// as little.
	AtCost      string
	AtCostStall float64
	AtCostFound bool
	// AtStall is the cheapest such baseline that stalls no more, with the
	// core-hours it reserves; AtStallFound is false when none stalls as
	// little.
	AtStall      string
	AtStallCoreH float64
	AtStallFound bool
}

// StallRatio is Sluice's stall over the best baseline's at its cost
// (target: at most 0.5).
func (v Verdict) StallRatio() float64 { return ratio(v.Sluice.StallGPUh, v.AtCostStall) }

// CostRatio is Sluice's reserved core-hours over those of the cheapest
// baseline that stalls no more.
func (v Verdict) CostRatio() float64 { return ratio(v.Sluice.ReservedCoreH, v.AtStallCoreH) }

func ratio(a, b float64) float64 {
	switch {
	case b > 0:
		return a / b
	case a == 0:
		return 1
	}
	return math.Inf(1)
}

// curve is one baseline over its knob (static allocation's cores per
// trial, a replica cap), by reserved core-hours; between two of its points
// the baseline can be run as a mix of the two.
type curve struct {
	name   string
	points []RunResult
}

// Verdicts set each Sluice run beside the baselines.
func (c Comparison) Verdicts() []Verdict {
	var out []Verdict
	for _, r := range c.Results {
		if r.Baseline() {
			continue
		}
		v := Verdict{Sluice: r}
		for _, cv := range c.curves(r.Sharing) {
			if name, stall, ok := cv.stallAt(r.ReservedCoreH); ok && (!v.AtCostFound || stall < v.AtCostStall) {
				v.AtCost, v.AtCostStall, v.AtCostFound = name, stall, true
			}
			if name, coreH, ok := cv.costAt(r.StallGPUh); ok && (!v.AtStallFound || coreH < v.AtStallCoreH) {
				v.AtStall, v.AtStallCoreH, v.AtStallFound = name, coreH, true
			}
		}
		out = append(out, v)
	}
	return out
}

// curves are the baselines comparable with a Sluice run of sharing, one
// per policy and sharing.
func (c Comparison) curves(sharing Sharing) []curve {
	index := map[string]int{}
	var out []curve
	for _, r := range c.Results {
		if !r.Baseline() || r.Sharing != Independent && r.Sharing != sharing {
			continue
		}
		name := fmt.Sprintf("%s, %s", r.Policy, r.Sharing)
		if r.Policy == trace.Static {
			name = "static"
		}
		i, ok := index[name]
		if !ok {
			i = len(out)
			index[name] = i
			out = append(out, curve{name: name})
		}
		out[i].points = append(out[i].points, r)
	}
	for _, cv := range out {
		sort.Slice(cv.points, func(i, j int) bool { return cv.points[i].ReservedCoreH < cv.points[j].ReservedCoreH })
	}
	return out
}

func reserved(r RunResult) float64 { return r.ReservedCoreH }
func stalled(r RunResult) float64  { return r.StallGPUh }

// stallAt is the least stall the curve reaches at coreH or fewer.
func (cv curve) stallAt(coreH float64) (string, float64, bool) {
	return cv.least(coreH, reserved, stalled)
}

// costAt is the fewest core-hours at which the curve stalls at most stall.
func (cv curve) costAt(stall float64) (string, float64, bool) {
	return cv.least(stall, stalled, reserved)
}

// least is the least val the curve reaches where key is at most at: at
// its points, and on the line between two points whose keys lie either
// side of at (the baseline run as a mix of the two settings).
func (cv curve) least(at float64, key, val func(RunResult) float64) (name string, v float64, found bool) {
	consider := func(n string, x float64) {
		if !found || x < v {
			name, v, found = n, x, true
		}
	}
	for i, p := range cv.points {
		if key(p) <= at*(1+1e-9) {
			consider(p.Name(), val(p))
		}
		if i == 0 {
			continue
		}
		a := cv.points[i-1]
		if min(key(a), key(p)) < at && at < max(key(a), key(p)) {
			f := (at - key(a)) / (key(p) - key(a))
			consider(fmt.Sprintf("%s, between %s and %s", cv.name, a.knob(), p.knob()), val(a)+f*(val(p)-val(a)))
		}
	}
	return name, v, found
}

// knob is where a baseline run sits on its curve.
func (r Run) knob() string {
	switch {
	case r.Policy == trace.Static:
		return fmt.Sprintf("%g cores/trial", r.StaticCores)
	case r.MaxReplicas > 0:
		return fmt.Sprintf("<=%d/job", r.MaxReplicas)
	}
	return "uncapped"
}
