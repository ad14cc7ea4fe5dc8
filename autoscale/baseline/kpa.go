package baseline

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/serving/pkg/apis/autoscaling"
	"knative.dev/serving/pkg/autoscaler/aggregation"
	asconfig "knative.dev/serving/pkg/autoscaler/config"
	"knative.dev/serving/pkg/autoscaler/config/autoscalerconfig"
	"knative.dev/serving/pkg/autoscaler/metrics"
	"knative.dev/serving/pkg/autoscaler/scaling"
)

// KPAConfig is what a revision sets for Knative's KPA beyond the cluster's
// config-autoscaler, which is Knative's defaults (target utilisation 70%,
// panic window 10% of the stable window, panic threshold 200%, scale up
// at most 1000x and down at most 2x per decision, scale-to-zero grace
// 30 s).
type KPAConfig struct {
	// ContainerConcurrency is the revision's (0: Knative's default target
	// of 100).
	ContainerConcurrency int
	// StableWindow is the window annotation (0: Knative's default, 60 s).
	StableWindow time.Duration
	// MinScale and MaxScale bound the count (0 max: none).
	MinScale, MaxScale int
}

// DefaultKPAConfig is a revision with containerConcurrency c and
// Knative's defaults.
func DefaultKPAConfig(c int) KPAConfig { return KPAConfig{ContainerConcurrency: c} }

// Validate names the first setting out of Knative's own range.
func (c KPAConfig) Validate() error {
	switch {
	case c.ContainerConcurrency < 0 || c.ContainerConcurrency > 1000:
		return fmt.Errorf("kpa: container concurrency %d: want 0..1000", c.ContainerConcurrency)
	case c.StableWindow != 0 && (c.StableWindow < autoscaling.WindowMin || c.StableWindow > autoscaling.WindowMax):
		return fmt.Errorf("kpa: stable window %v: want %v..%v", c.StableWindow, autoscaling.WindowMin, autoscaling.WindowMax)
	case c.MinScale < 0 || (c.MaxScale > 0 && c.MinScale > c.MaxScale):
		return fmt.Errorf("kpa: min scale %d: want 0..max scale", c.MinScale)
	}
	return nil
}

// kpaRevision is one job as Knative's KPA sees it: its decider, made by
// Knative's own MakeDecider from a PodAutoscaler and the default
// config-autoscaler, and run by Knative's own scaling.New; the metrics it
// reads (kpaMetrics) and the ready pods (podCount) are this package's.
type kpaRevision struct {
	cfg     KPAConfig
	as      *autoscalerconfig.Config
	scaler  scaling.UniScaler
	metrics *kpaMetrics
	pods    *podCount
	// zeroSince is when the decider began to want no pod (zero: it wants
	// some): the KPA's reconciler removes the last one only after the
	// scale-to-zero grace.
	zeroSince time.Time
	last      int
}

var nopLogger = zap.NewNop().Sugar()

func newKPARevision(name string, cfg KPAConfig) (*kpaRevision, error) {
	as, err := asconfig.NewConfigFromMap(map[string]string{})
	if err != nil {
		return nil, fmt.Errorf("kpa: knative's default config-autoscaler: %w", err)
	}
	d := deciderSpec(cfg, as)
	panicWindow := time.Duration(float64(d.StableWindow) * as.PanicWindowPercentage / 100)
	r := &kpaRevision{cfg: cfg, as: as, pods: &podCount{},
		metrics: &kpaMetrics{stable: aggregation.NewTimedFloat64Buckets(d.StableWindow, asconfig.BucketSize),
			panic: aggregation.NewTimedFloat64Buckets(panicWindow, asconfig.BucketSize)}}
	// Created with no pod ready, as a new revision's is: a decider made
	// with more starts in panic mode on the wall clock.
	r.scaler = scaling.New(context.Background(), "sluice", name, r.metrics, r.pods, &d)
	return r, nil
}

// deciderSpec is what Knative's MakeDecider (pkg/reconciler/autoscaling/
// kpa/resources) makes of a concurrency-scaled, reachable revision with
// cfg's containerConcurrency and window under config-autoscaler as: the
// target is containerConcurrency (or the default 100) x the target
// utilisation.
func deciderSpec(cfg KPAConfig, as *autoscalerconfig.Config) scaling.DeciderSpec {
	total := float64(cfg.ContainerConcurrency)
	if total == 0 {
		total = as.ContainerConcurrencyTargetDefault
	}
	window := as.StableWindow
	if cfg.StableWindow > 0 {
		window = cfg.StableWindow
	}
	return scaling.DeciderSpec{
		MaxScaleUpRate: as.MaxScaleUpRate, MaxScaleDownRate: as.MaxScaleDownRate, ScalingMetric: autoscaling.Concurrency,
		TargetValue: max(total*as.ContainerConcurrencyTargetFraction, autoscaling.TargetMin), TotalValue: total,
		TargetBurstCapacity: as.TargetBurstCapacity, ActivatorCapacity: as.ActivatorCapacity,
		PanicThreshold: as.PanicThresholdPercentage / 100, StableWindow: window, ScaleDownDelay: as.ScaleDownDelay,
		InitialScale: as.InitialScale, Reachable: true,
	}
}

// decide records the concurrency observed now, runs Knative's decider,
// then the reconciler's scale-to-zero grace and min/max scale.
func (r *kpaRevision) decide(conc float64, ready int, now time.Time) (int, string) {
	r.metrics.record(now, conc)
	r.pods.ready = ready
	res := r.scaler.Scale(nopLogger, now)
	if !res.ScaleValid {
		return r.last, "kpa: no metrics yet: hold"
	}
	n := int(res.DesiredPodCount)
	reason := fmt.Sprintf("kpa: %.1f in flight (stable), %.1f (panic)", r.metrics.stable.WindowAverage(now), r.metrics.panic.WindowAverage(now))
	switch {
	case n > 0:
		r.zeroSince = time.Time{}
	case r.zeroSince.IsZero():
		r.zeroSince = now
	}
	if n == 0 && r.last > 0 && now.Sub(r.zeroSince) < r.as.ScaleToZeroGracePeriod {
		n, reason = 1, reason+"; keeping the last pod for the scale-to-zero grace"
	}
	n = max(n, r.cfg.MinScale)
	if r.cfg.MaxScale > 0 {
		n = min(n, r.cfg.MaxScale)
	}
	r.last = n
	return n, reason
}

// kpaMetrics is the decider's metrics.MetricClient: the concurrency the
// revision's activator and queue-proxies would report, averaged over the
// stable and the panic windows as Knative's collector does (its own
// bucketed averages, one-second buckets).
type kpaMetrics struct {
	stable, panic *aggregation.TimedFloat64Buckets
}

var _ metrics.MetricClient = (*kpaMetrics)(nil)

func (m *kpaMetrics) record(now time.Time, conc float64) {
	m.stable.Record(now, max(conc, 0))
	m.panic.Record(now, max(conc, 0))
}

// StableAndPanicConcurrency implements metrics.MetricClient.
func (m *kpaMetrics) StableAndPanicConcurrency(_ types.NamespacedName, now time.Time) (float64, float64, error) {
	if m.stable.IsEmpty(now) {
		return 0, 0, metrics.ErrNoData
	}
	return m.stable.WindowAverage(now), m.panic.WindowAverage(now), nil
}

// StableAndPanicRPS implements metrics.MetricClient; the revision scales
// on concurrency.
func (m *kpaMetrics) StableAndPanicRPS(types.NamespacedName, time.Time) (float64, float64, error) {
	return 0, 0, metrics.ErrNoData
}

// podCount is the revision's ready pods, as its endpoints would count them.
type podCount struct{ ready int }

func (p *podCount) ReadyCount() (int, error)    { return p.ready, nil }
func (p *podCount) NotReadyCount() (int, error) { return 0, nil }

// kpaName keeps a job's name a valid revision name for the decider's
// metric key; the key only has to be stable.
func kpaName(job string) string { return "job-" + strconv.Quote(job) }
