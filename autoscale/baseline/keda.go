package baseline

import (
	"fmt"
	"math"
	"time"
)

// KEDAConfig is a KEDA ScaledObject over a queue-lag trigger (the NATS
// JetStream scaler's lagThreshold) and the HPA it drives; see DecideKEDA.
type KEDAConfig struct {
	// PollingInterval is how often KEDA polls the trigger to activate a
	// deployment at zero or to deactivate it (pollingInterval, default 30s).
	PollingInterval time.Duration
	// HPASyncPeriod is how often the HPA reads the lag through KEDA's
	// metrics adapter and resizes an active deployment (the controller
	// manager's --horizontal-pod-autoscaler-sync-period, default 15s).
	HPASyncPeriod time.Duration
	// LagThreshold is the lag one replica is sized for: the HPA wants
	// ceil(lag / LagThreshold) (lagThreshold, default 10).
	LagThreshold float64
	// ActivationLag is the lag above which a deployment is active
	// (activationLagThreshold, default 0).
	ActivationLag float64
	// CooldownPeriod is how long after the last poll with lag above
	// ActivationLag the deployment goes to MinReplicaCount (default 300s).
	CooldownPeriod time.Duration
	// ScaleDownStabilization: the HPA scales down only to the highest
	// count it wanted within this window (default 300s); it scales up at
	// once, by at most max(100%, 4 pods) per sync.
	ScaleDownStabilization time.Duration
	// Tolerance is the HPA's: it holds while lag / (LagThreshold x
	// replicas) is within 1 +- Tolerance (the controller manager's
	// --horizontal-pod-autoscaler-tolerance, default 0.1).
	Tolerance float64
	// MinReplicaCount and MaxReplicaCount bound the count (0 max: none).
	MinReplicaCount, MaxReplicaCount int
	// Phase is the time KEDA's polls and the HPA's syncs are aligned to:
	// a job arriving between two waits for the next, as it would in a
	// cluster where KEDA polls on its own clock.
	Phase time.Time
}

// DefaultKEDAConfig is KEDA's and the HPA's defaults with lagThreshold 10.
func DefaultKEDAConfig() KEDAConfig {
	return KEDAConfig{
		PollingInterval:        30 * time.Second,
		HPASyncPeriod:          15 * time.Second,
		LagThreshold:           10,
		CooldownPeriod:         300 * time.Second,
		ScaleDownStabilization: 300 * time.Second,
		Tolerance:              0.1,
	}
}

// Validate names the first setting out of range.
func (c KEDAConfig) Validate() error {
	switch {
	case c.PollingInterval < time.Second || c.PollingInterval > time.Hour:
		return fmt.Errorf("keda: polling interval %v: want 1s..1h", c.PollingInterval)
	case c.HPASyncPeriod < time.Second || c.HPASyncPeriod > time.Hour:
		return fmt.Errorf("keda: hpa sync period %v: want 1s..1h", c.HPASyncPeriod)
	case !(c.LagThreshold > 0):
		return fmt.Errorf("keda: lag threshold %v: want > 0", c.LagThreshold)
	case !(c.ActivationLag >= 0):
		return fmt.Errorf("keda: activation lag %v: want >= 0", c.ActivationLag)
	case c.CooldownPeriod < 0 || c.CooldownPeriod > 24*time.Hour:
		return fmt.Errorf("keda: cooldown period %v: want 0..24h", c.CooldownPeriod)
	case c.ScaleDownStabilization < 0 || c.ScaleDownStabilization > time.Hour:
		return fmt.Errorf("keda: scale-down stabilization %v: want 0..1h", c.ScaleDownStabilization)
	case !(c.Tolerance >= 0 && c.Tolerance < 1):
		return fmt.Errorf("keda: hpa tolerance %v: want 0 <= tolerance < 1", c.Tolerance)
	case c.MinReplicaCount < 0 || (c.MaxReplicaCount > 0 && c.MinReplicaCount > c.MaxReplicaCount):
		return fmt.Errorf("keda: min replica count %d: want 0..max replica count", c.MinReplicaCount)
	}
	return nil
}

// KEDARecommendation is one count the HPA wanted, kept for its scale-down
// stabilization.
type KEDARecommendation struct {
	At       time.Time
	Replicas int
}

// KEDAState is what KEDA and the HPA remember between decisions.
type KEDAState struct {
	Replicas int
	// Started is false until the first decision, which only notes the
	// poll and sync periods it falls in: nothing is polled mid-period.
	Started        bool
	Poll, Sync     int64
	LastActive     time.Time
	Active         bool
	Recommendation []KEDARecommendation
}

// KEDADecision is a replica count and why.
type KEDADecision struct {
	Replicas int
	Reason   string
}

// period is the index of the period of length d that t falls in.
func period(phase, t time.Time, d time.Duration) int64 {
	return int64(math.Floor(float64(t.Sub(phase)) / float64(d)))
}

// DecideKEDA is KEDA's queue-lag scaling with the HPA behind it: at each
// polling interval KEDA activates a deployment at zero whose lag exceeds
// ActivationLag (to one replica, or MinReplicaCount) and, CooldownPeriod
// after the last poll that saw lag, deactivates it; at each HPA sync an
// active deployment is resized to ceil(lag / LagThreshold), up at once
// (at most max(2x, +4) per sync) and down only to the highest count
// wanted within ScaleDownStabilization. Between polls and syncs the
// count holds. It is a pure function of (cfg, st, the lag observed now,
// now); it does not modify st.
func DecideKEDA(cfg KEDAConfig, st KEDAState, lag float64, now time.Time) (KEDADecision, KEDAState) {
	next := st
	next.Recommendation = append([]KEDARecommendation(nil), st.Recommendation...)
	poll, sync := period(cfg.Phase, now, cfg.PollingInterval), period(cfg.Phase, now, cfg.HPASyncPeriod)
	clampMax := func(n int) int {
		if cfg.MaxReplicaCount > 0 {
			return min(n, cfg.MaxReplicaCount)
		}
		return n
	}
	if !st.Started {
		next.Started, next.Poll, next.Sync = true, poll, sync
		next.Replicas = cfg.MinReplicaCount
		return KEDADecision{next.Replicas, "waiting for the first poll"}, next
	}
	reason := fmt.Sprintf("hold %d between polls", st.Replicas)
	if poll > st.Poll {
		next.Poll = poll
		if lag > cfg.ActivationLag {
			next.LastActive = now
			if !st.Active {
				next.Active = true
				next.Replicas = clampMax(max(st.Replicas, cfg.MinReplicaCount, 1))
				next.Recommendation = append(next.Recommendation, KEDARecommendation{now, next.Replicas})
				reason = fmt.Sprintf("poll: lag %.0f > activation %.0f: activate", lag, cfg.ActivationLag)
			}
		} else if st.Active && now.Sub(st.LastActive) >= cfg.CooldownPeriod {
			next.Active, next.Replicas, next.Recommendation = false, cfg.MinReplicaCount, nil
			return KEDADecision{next.Replicas, fmt.Sprintf("poll: no lag for the cooldown %v: deactivate", cfg.CooldownPeriod)}, next
		}
	}
	if next.Active && sync > st.Sync {
		next.Sync = sync
		reason = hpaSync(cfg, &next, lag, now)
	}
	return KEDADecision{next.Replicas, reason}, next
}

// hpaSync is one HPA sync of an active deployment: HPADesired within
// the bounds, up at once by at most max(2x, +4) (the default scale-up
// policies, 100% or 4 pods a period), down only to the highest count
// recommended within ScaleDownStabilization.
func hpaSync(cfg KEDAConfig, next *KEDAState, lag float64, now time.Time) string {
	cur := next.Replicas
	want := max(HPADesired(cur, lag, cfg.LagThreshold, cfg.Tolerance), cfg.MinReplicaCount, 1)
	if cfg.MaxReplicaCount > 0 {
		want = min(want, cfg.MaxReplicaCount)
	}
	if want > cur {
		want = min(want, max(2*cur, cur+4))
	}
	next.Recommendation = append(next.Recommendation, KEDARecommendation{now, want})
	for len(next.Recommendation) > 0 && now.Sub(next.Recommendation[0].At) > cfg.ScaleDownStabilization {
		next.Recommendation = next.Recommendation[1:]
	}
	stable := want
	for _, r := range next.Recommendation {
		stable = max(stable, r.Replicas)
	}
	if want < cur {
		want = min(cur, stable)
	}
	next.Replicas = want
	return fmt.Sprintf("hpa: lag %.0f / threshold %.3g wants %d", lag, cfg.LagThreshold, want)
}

// HPADesired is the HPA's replica count for an external metric with an
// AverageValue target (KEDA's scalers' kind): with usage = metric /
// (target x current), the current count while usage is within 1 +-
// tolerance, else ceil(metric / target). At zero replicas (KEDA
// activates a deployment, not the HPA) it is ceil(metric / target).
func HPADesired(current int, metric, target, tolerance float64) int {
	if current > 0 {
		usage := metric / (target * float64(current))
		if math.Abs(1-usage) <= tolerance {
			return current
		}
	}
	return int(math.Ceil(metric / target))
}
