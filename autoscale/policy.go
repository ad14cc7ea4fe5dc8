package autoscale

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// Config bounds and tunes the policy; see the package documentation.
type Config struct {
	// MinReplicas is kept per job while it has work (0 allows scale to zero);
	// MaxReplicas caps a job.
	MinReplicas, MaxReplicas int
	// InitialReplicas are started when a job activates from zero.
	InitialReplicas int
	// TargetStall is the stall fraction considered healthy.
	TargetStall float64
	// Headroom multiplies the replicas the trainer's appetite requires.
	Headroom float64
	// ScaleDownDelay is how long a higher count is kept after the last
	// decision that wanted it.
	ScaleDownDelay time.Duration
	// MaxStepUp limits a scale up to max(2 x current, current + MaxStepUp).
	MaxStepUp int
	// DemandStale is the age past which a demand signal is ignored.
	DemandStale time.Duration
	// ClusterCapacity caps replicas across all jobs; 0 means MaxReplicas.
	ClusterCapacity int
	// Allocator shares ClusterCapacity between jobs when it is short:
	// AllocatorMarginal (also "") or AllocatorFair.
	Allocator string
}

// Allocators (Config.Allocator).
const (
	// AllocatorMarginal gives each next replica to the job whose trainer
	// gains most (AllocateMarginal with DefaultMarginalOptions).
	AllocatorMarginal = "marginal"
	// AllocatorFair is the weighted max-min fair split (Allocate).
	AllocatorFair = "fair"
)

// DefaultConfig is the policy for one machine.
func DefaultConfig() Config {
	return Config{
		MinReplicas:     0,
		MaxReplicas:     8,
		InitialReplicas: 1,
		TargetStall:     0.05,
		Headroom:        1.2,
		ScaleDownDelay:  5 * time.Second,
		MaxStepUp:       2,
		DemandStale:     5 * time.Second,
		Allocator:       AllocatorMarginal,
	}
}

// ForJob is the config one job's decisions use: its own min and max
// replicas (max 0 keeps c.MaxReplicas), a max never above the cluster
// capacity, and InitialReplicas within them.
func (c Config) ForJob(minReplicas, maxReplicas int) Config {
	if maxReplicas > 0 {
		c.MaxReplicas = maxReplicas
	}
	c.MaxReplicas = max(min(c.MaxReplicas, c.Capacity()), 1)
	c.MinReplicas = min(max(minReplicas, 0), c.MaxReplicas)
	c.InitialReplicas = min(max(c.InitialReplicas, 1), c.MaxReplicas)
	return c
}

// Capacity is the cluster capacity in effect.
func (c Config) Capacity() int {
	if c.ClusterCapacity == 0 {
		return c.MaxReplicas
	}
	return c.ClusterCapacity
}

// Validate names the first field out of range and its allowed range.
func (c Config) Validate() error {
	switch {
	case c.MaxReplicas < 1 || c.MaxReplicas > 10000:
		return fmt.Errorf("autoscale: max replicas %d: want 1..10000", c.MaxReplicas)
	case c.MinReplicas < 0 || c.MinReplicas > c.MaxReplicas:
		return fmt.Errorf("autoscale: min replicas %d: want 0..%d (max replicas)", c.MinReplicas, c.MaxReplicas)
	case c.InitialReplicas < 1 || c.InitialReplicas > c.MaxReplicas:
		return fmt.Errorf("autoscale: initial replicas %d: want 1..%d (max replicas)", c.InitialReplicas, c.MaxReplicas)
	case !(c.TargetStall >= 0 && c.TargetStall < 1):
		return fmt.Errorf("autoscale: target stall %v: want 0 <= stall < 1", c.TargetStall)
	case !(c.Headroom >= 1 && c.Headroom <= 10):
		return fmt.Errorf("autoscale: headroom %v: want 1..10", c.Headroom)
	case c.ScaleDownDelay < 0 || c.ScaleDownDelay > time.Hour:
		return fmt.Errorf("autoscale: scale down delay %v: want 0..1h", c.ScaleDownDelay)
	case c.MaxStepUp < 1:
		return fmt.Errorf("autoscale: max step up %d: want >= 1", c.MaxStepUp)
	case c.DemandStale <= 0 || c.DemandStale > time.Hour:
		return fmt.Errorf("autoscale: demand stale %v: want > 0 and <= 1h", c.DemandStale)
	case c.ClusterCapacity < 0 || c.ClusterCapacity > 100000:
		return fmt.Errorf("autoscale: cluster capacity %d: want 0 (= max replicas)..100000", c.ClusterCapacity)
	case c.Allocator != "" && c.Allocator != AllocatorMarginal && c.Allocator != AllocatorFair:
		return fmt.Errorf("autoscale: allocator %q: want %s or %s", c.Allocator, AllocatorMarginal, AllocatorFair)
	}
	return nil
}

// Inputs are what a decision sees about one job.
type Inputs struct {
	// Demand is the latest signal from the job's trainer agent (nil if
	// none), received at DemandAt.
	Demand   *wire.Demand
	DemandAt time.Time
	// Pending and InFlight count the job's shard tasks; Done is set once
	// the job needs no more work.
	Pending, InFlight int
	Done              bool
	// Ready is how many replicas serve now (the actuator's view).
	Ready int
}

// Want is one past decision's raw replica count.
type Want struct {
	At       time.Time
	Replicas int
}

// State is what the policy remembers about a job between decisions.
type State struct {
	Replicas         int
	LastUp, LastDown time.Time
	// PerReplica is one replica's throughput in samples/s, learned while
	// the agent's buffer did not throttle arrivals; 0 until known.
	PerReplica float64
	// Wants are the raw counts wanted within the last ScaleDownDelay, oldest first.
	Wants []Want
}

// Decision is a replica count and a short sentence saying why.
type Decision struct {
	Replicas int
	Reason   string
}

// bufferFull is the fill above which the agent throttles arrivals and the
// job counts as over-supplied.
const bufferFull = 0.75

// Decide is the scaling policy for one job; it returns the decision and the
// state to pass to the next call. It does not modify st.
func Decide(cfg Config, st State, in Inputs, now time.Time) (Decision, State) {
	next := st
	next.Wants = append([]Want(nil), st.Wants...)
	cur := st.Replicas
	work := in.Pending + in.InFlight

	// Terminal and idle cases move at once and forget the window.
	settle := func(n int, reason string) (Decision, State) {
		next.Wants = nil
		next.Replicas = n
		if n < cur {
			next.LastDown = now
		} else if n > cur {
			next.LastUp = now
		}
		return Decision{n, reason}, next
	}
	if in.Done || (in.Demand != nil && in.Demand.Done) {
		return settle(0, "job done")
	}
	if work <= 0 {
		return settle(cfg.MinReplicas, "no tasks pending or in flight")
	}
	floor := max(cfg.MinReplicas, 1)
	ceiling := max(floor, min(cfg.MaxReplicas, work))
	if cur == 0 {
		n := min(max(cfg.InitialReplicas, floor), ceiling)
		next.Wants = []Want{{now, n}}
		next.Replicas, next.LastUp = n, now
		return Decision{n, fmt.Sprintf("activate from zero: %d tasks pending", in.Pending)}, next
	}

	want, reason := cur, ""
	if in.Demand == nil || in.DemandAt.IsZero() || now.Sub(in.DemandAt) > cfg.DemandStale {
		reason = fmt.Sprintf("no fresh demand: hold %d", cur)
	} else {
		want, reason = wantFor(cfg, &next, in, cur)
	}

	// Bounds: a scale up is limited per step; no job gets more than
	// MaxReplicas or more replicas than tasks that could run.
	if step := max(2*cur, cur+cfg.MaxStepUp); want > step && step < ceiling {
		reason += fmt.Sprintf("; %d this step", step)
		want = step
	}
	if want > ceiling {
		reason += fmt.Sprintf("; capped at %d by %s", ceiling, ceilingName(cfg, work))
		want = ceiling
	}
	want = max(want, floor)

	// Remember this want and go down only as far as the window allows.
	next.Wants = append(next.Wants, Want{now, want})
	for len(next.Wants) > 0 && now.Sub(next.Wants[0].At) > cfg.ScaleDownDelay {
		next.Wants = next.Wants[1:]
	}
	n := want
	if n < cur {
		hi := 0
		for _, w := range next.Wants {
			hi = max(hi, w.Replicas)
		}
		if hi > n {
			n = min(hi, cur)
			if n == cur {
				reason += fmt.Sprintf("; holding %d for the scale-down delay", cur)
			} else {
				reason += fmt.Sprintf("; %d within the scale-down delay", n)
			}
		}
	}
	next.Replicas = n
	switch {
	case n > cur:
		next.LastUp = now
	case n < cur:
		next.LastDown = now
	}
	return Decision{n, reason}, next
}

func ceilingName(cfg Config, work int) string {
	if work < cfg.MaxReplicas {
		return fmt.Sprintf("%d tasks pending or in flight", work)
	}
	return "max replicas"
}

// wantFor reads a fresh demand signal: it updates the learned per-replica
// throughput in next and returns the raw count wanted.
func wantFor(cfg Config, next *State, in Inputs, cur int) (int, string) {
	d := in.Demand
	stall := min(max(d.StallFraction, 0), 1)
	fill := bufferFill(*d)
	serving := min(in.Ready, cur)
	if serving == 0 && cur > 0 && d.ArrivedPerS > 0 {
		// The actuator's view lags: a kubelet can report a pod ready
		// seconds after it serves through the activator. Samples arriving
		// prove one replica serves.
		serving = 1
	}
	if fill < bufferFull && serving > 0 && d.ArrivedPerS > 0 {
		observed := d.ArrivedPerS / float64(serving)
		if next.PerReplica == 0 {
			next.PerReplica = observed
		} else {
			next.PerReplica = 0.5*next.PerReplica + 0.5*observed
		}
	}
	r := next.PerReplica
	appetite := d.ConsumedPerS / max(1-stall, 0.1)
	need := 0.0
	if r > 0 {
		need = cfg.Headroom * appetite / r
	}
	pct := func(f float64) float64 { return math.Round(f * 100) }

	if stall > cfg.TargetStall {
		if serving < cur && (r == 0 || appetite == 0) {
			return cur, fmt.Sprintf("trainer stalled %.0f%% while %d of %d replicas start: hold", pct(stall), cur-serving, cur)
		}
		if r == 0 {
			return cur + 1, fmt.Sprintf("trainer stalled %.0f%% and no per-replica rate to size by yet: add one", pct(stall))
		}
		if appetite == 0 {
			return cur + 1, fmt.Sprintf("trainer stalled %.0f%% and starved (no batch in the interval): add one", pct(stall))
		}
		want := int(math.Ceil(need))
		if want <= cur {
			return cur, fmt.Sprintf("trainer stalled %.0f%% but %d replicas of %.0f/s each cover %.0f/s: hold", pct(stall), cur, r, appetite)
		}
		return want, fmt.Sprintf("trainer stalled %.0f%%: need %d (%.1f replicas of %.0f/s each)", pct(stall), want, need, r)
	}
	if fill >= bufferFull && r > 0 {
		want := max(int(math.Ceil(need)), 1)
		if want < cur {
			return want, fmt.Sprintf("buffer %.0f%% full, stall %.0f%%: %d replicas of %.0f/s each cover %.0f/s", pct(fill), pct(stall), want, r, appetite)
		}
	}
	return cur, fmt.Sprintf("stall %.0f%%, buffer %.0f%% full: hold %d", pct(stall), pct(fill), cur)
}
