package baseline

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// KPAConfig is Knative's KPA for one revision as its config-autoscaler
// and the revision's annotations set it; see DecideKPA.
type KPAConfig struct {
	// Target is the concurrency one replica is sized for: the target
	// annotation (or containerConcurrency) x target-utilization / 100.
	Target float64
	// StableWindow is the window annotation (default 60s); the panic
	// window is PanicWindowPercentage of it (default 10: 6s).
	StableWindow          time.Duration
	PanicWindowPercentage float64
	// PanicThresholdPercentage: the KPA panics when the panic window asks
	// for this share of the ready replicas or more (default 200).
	PanicThresholdPercentage float64
	// MaxScaleUpRate and MaxScaleDownRate bound one decision to ready x
	// up-rate and ready / down-rate (defaults 1000 and 2).
	MaxScaleUpRate, MaxScaleDownRate float64
	// ScaleToZeroGrace is how long the last replica stays after the
	// stable window saw no request (default 30s).
	ScaleToZeroGrace time.Duration
	// MinScale and MaxScale bound the count (0 max: no limit).
	MinScale, MaxScale int
}

// DefaultKPAConfig is Knative's default for a revision with
// containerConcurrency c: target c (100 when c is 0) at 70% utilization.
func DefaultKPAConfig(c int) KPAConfig {
	target := 100.0
	if c > 0 {
		target = float64(c)
	}
	return KPAConfig{
		Target:                   target * 0.7,
		StableWindow:             60 * time.Second,
		PanicWindowPercentage:    10,
		PanicThresholdPercentage: 200,
		MaxScaleUpRate:           1000,
		MaxScaleDownRate:         2,
		ScaleToZeroGrace:         30 * time.Second,
	}
}

// Validate names the first setting out of Knative's own range.
func (c KPAConfig) Validate() error {
	switch {
	case !(c.Target >= 0.01):
		return fmt.Errorf("kpa: target %v: want >= 0.01", c.Target)
	case c.StableWindow < 6*time.Second || c.StableWindow > time.Hour:
		return fmt.Errorf("kpa: stable window %v: want 6s..1h", c.StableWindow)
	case !(c.PanicWindowPercentage >= 1 && c.PanicWindowPercentage <= 100):
		return fmt.Errorf("kpa: panic window percentage %v: want 1..100", c.PanicWindowPercentage)
	case !(c.PanicThresholdPercentage >= 110 && c.PanicThresholdPercentage <= 1000):
		return fmt.Errorf("kpa: panic threshold percentage %v: want 110..1000", c.PanicThresholdPercentage)
	case !(c.MaxScaleUpRate > 1):
		return fmt.Errorf("kpa: max scale up rate %v: want > 1", c.MaxScaleUpRate)
	case !(c.MaxScaleDownRate > 1):
		return fmt.Errorf("kpa: max scale down rate %v: want > 1", c.MaxScaleDownRate)
	case c.ScaleToZeroGrace < 0 || c.ScaleToZeroGrace > time.Hour:
		return fmt.Errorf("kpa: scale-to-zero grace %v: want 0..1h", c.ScaleToZeroGrace)
	case c.MinScale < 0 || (c.MaxScale > 0 && c.MinScale > c.MaxScale):
		return errors.New("kpa: min scale: want 0..max scale")
	}
	return nil
}

// KPASample is the concurrency the KPA observed at one time.
type KPASample struct {
	At          time.Time
	Concurrency float64
}

// KPAState is what the KPA remembers between decisions.
type KPAState struct {
	Replicas int
	// Samples are the observations within the stable window, oldest first.
	Samples []KPASample
	// PanicSince is when the panic mode was last (re)entered; zero when
	// not panicking. MaxPanic is the highest count wanted while panicking.
	PanicSince time.Time
	MaxPanic   int
	// LastActive is the last time a request was seen.
	LastActive time.Time
}

// KPADecision is a replica count and why.
type KPADecision struct {
	Replicas int
	Panic    bool
	Reason   string
}

// DecideKPA is Knative's KPA, after knative.dev/serving's
// pkg/autoscaler/scaling: it sizes the revision by the average concurrency
// of the stable window, or of the shorter panic window while that asks for
// PanicThresholdPercentage of the ready replicas or more; in panic it
// never scales down until a whole stable window passed below the
// threshold. A decision moves at most MaxScaleUpRate x ready up and to
// ready / MaxScaleDownRate down, within MinScale..MaxScale; the last
// replica goes only ScaleToZeroGrace after the stable window emptied.
// It is a pure function of (cfg, st, the concurrency observed now, the
// ready replicas, now); it does not modify st.
func DecideKPA(cfg KPAConfig, st KPAState, concurrency float64, ready int, now time.Time) (KPADecision, KPAState) {
	next := st
	next.Samples = append(append([]KPASample(nil), st.Samples...), KPASample{now, max(concurrency, 0)})
	for len(next.Samples) > 0 && now.Sub(next.Samples[0].At) >= cfg.StableWindow {
		next.Samples = next.Samples[1:]
	}
	if concurrency > 0 {
		next.LastActive = now
	}
	panicWindow := time.Duration(float64(cfg.StableWindow) * cfg.PanicWindowPercentage / 100)
	var stableSum, panicSum float64
	var panicN int
	for _, s := range next.Samples {
		stableSum += s.Concurrency
		if now.Sub(s.At) < panicWindow {
			panicSum += s.Concurrency
			panicN++
		}
	}
	stableAvg := stableSum / float64(len(next.Samples))
	panicAvg := panicSum / float64(max(panicN, 1))

	readyPods := float64(max(ready, 1))
	maxUp := int(math.Ceil(cfg.MaxScaleUpRate * readyPods))
	maxDown := int(math.Floor(readyPods / cfg.MaxScaleDownRate))
	clamp := func(n int) int { return min(max(n, maxDown), maxUp) }
	stable := clamp(int(math.Ceil(stableAvg / cfg.Target)))
	panicking := clamp(int(math.Ceil(panicAvg / cfg.Target)))
	over := float64(panicking)/readyPods >= cfg.PanicThresholdPercentage/100

	switch {
	case over:
		next.PanicSince = now
	case !next.PanicSince.IsZero() && now.Sub(next.PanicSince) > cfg.StableWindow:
		next.PanicSince, next.MaxPanic = time.Time{}, 0
	}
	want, reason := stable, fmt.Sprintf("stable: %.1f in flight over %v / target %.3g", stableAvg, cfg.StableWindow, cfg.Target)
	if !next.PanicSince.IsZero() {
		next.MaxPanic = max(next.MaxPanic, panicking)
		want = next.MaxPanic
		reason = fmt.Sprintf("panic: %.1f in flight over %v / target %.3g, %d ready", panicAvg, panicWindow, cfg.Target, ready)
	}
	if want == 0 && st.Replicas > 0 && now.Sub(next.LastActive) < cfg.StableWindow+cfg.ScaleToZeroGrace {
		want, reason = 1, "no requests in the stable window: keeping the last replica for the scale-to-zero grace"
	}
	if want < cfg.MinScale {
		want, reason = cfg.MinScale, reason+fmt.Sprintf("; min-scale %d", cfg.MinScale)
	}
	if cfg.MaxScale > 0 && want > cfg.MaxScale {
		want, reason = cfg.MaxScale, reason+fmt.Sprintf("; max-scale %d", cfg.MaxScale)
	}
	next.Replicas = want
	return KPADecision{Replicas: want, Panic: !next.PanicSince.IsZero(), Reason: reason}, next
}
