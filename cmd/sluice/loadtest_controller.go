package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/autoscale/baseline"
)

// runLoadtestController is `sluice loadtest controller`, hidden: the
// controller `sluice loadtest sweep` starts, with the flags that let a
// baseline size the replicas in place of Sluice's policy. They are the
// load test's, not the production controller's.
func runLoadtestController(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runControllerWith(ctx, "loadtest controller", args, stdout, stderr, &baselineFlags{})
}

// baselineFlags choose who sizes the replicas of a load test's
// controller (with --actuator local): Sluice's policy or a baseline. A nil
// *baselineFlags has none (the production controller).
type baselineFlags struct {
	scaling   *string
	kpaWindow *time.Duration
	keda      baseline.KEDAConfig
	// With --actuator knative: Knative's own KPA in place of Sluice's
	// policy, the agents keeping a fixed number of tasks in flight.
	knativeScaling *string
	kpaInFlight    *int
}

func (b *baselineFlags) register(fs *flag.FlagSet) {
	if b == nil {
		return
	}
	b.scaling = fs.String("local-scaling", "sluice", "with --actuator local: who sizes replicas: sluice (its demand-driven policy), kpa (Knative's KPA alone, from the requests a push dispatcher with a fixed parallelism would keep outstanding) or keda (a KEDA ScaledObject on the job's queue lag and its HPA): the baselines to compare with")
	b.kpaWindow = fs.Duration("kpa-window", 60*time.Second, "with --local-scaling kpa: the KPA's stable window (Knative's window annotation)")
	b.keda = baseline.DefaultKEDAConfig()
	fs.DurationVar(&b.keda.PollingInterval, "keda-polling-interval", b.keda.PollingInterval, "with --local-scaling keda: KEDA's pollingInterval (activation and deactivation)")
	fs.DurationVar(&b.keda.HPASyncPeriod, "keda-hpa-sync", b.keda.HPASyncPeriod, "with --local-scaling keda: how often the HPA resizes an active job")
	fs.Float64Var(&b.keda.LagThreshold, "keda-lag-threshold", b.keda.LagThreshold, "with --local-scaling keda: the queue lag (tasks pending and in flight) one replica is sized for")
	fs.DurationVar(&b.keda.CooldownPeriod, "keda-cooldown", b.keda.CooldownPeriod, "with --local-scaling keda: KEDA's cooldownPeriod before a job without lag goes to its min replicas")
	fs.DurationVar(&b.keda.ScaleDownStabilization, "keda-scale-down-window", b.keda.ScaleDownStabilization, "with --local-scaling keda: the HPA's scale-down stabilization window")
	b.knativeScaling = fs.String("knative-scaling", "sluice", "with --actuator knative: who sizes the function Service: sluice (its demand-driven policy) or kpa (Knative's KPA alone, by the concurrency of --kpa-in-flight tasks each job's agents keep outstanding; the controller wakes, patches and decides nothing)")
	b.kpaInFlight = fs.Int("kpa-in-flight", 8, "with --knative-scaling kpa: the tasks each job's agents keep in flight, a multiple of --replica-concurrency (a data loader's fixed parallelism)")
}

// kpaAlone says whether Knative's KPA alone sizes the function Service.
func (b *baselineFlags) kpaAlone() bool { return b != nil && *b.knativeScaling == "kpa" }

// kpaDispatch is the fixed in-flight budget of --knative-scaling kpa, as
// the replicas' worth of tasks the controller's dispatch plans are sized
// by.
type kpaDispatch struct{ replicas int }

func (k kpaDispatch) Ready(string) int { return k.replicas }

// checks are the flags' checks; concurrency is --replica-concurrency.
func (b *baselineFlags) checks(concurrency *int) []func() error {
	if b == nil {
		return nil
	}
	return []func() error{
		oneOf("local-scaling", b.scaling, "sluice", "kpa", "keda"),
		b.keda.Validate,
		durationRange("kpa-window", b.kpaWindow, 6*time.Second, time.Hour),
		oneOf("knative-scaling", b.knativeScaling, "sluice", "kpa"),
		intRange("kpa-in-flight", b.kpaInFlight, 1, 10000),
		func() error {
			if *b.kpaInFlight%max(*concurrency, 1) != 0 {
				return fmt.Errorf("--kpa-in-flight %d: want a multiple of --replica-concurrency %d", *b.kpaInFlight, *concurrency)
			}
			return nil
		},
	}
}

// use makes the chosen baseline size r's jobs; replicas of concurrency
// shards each, at most maxReplicas.
func (b *baselineFlags) use(r *autoscale.Runner, concurrency, maxReplicas int) error {
	if b == nil {
		return nil
	}
	var p autoscale.Policy
	var err error
	switch *b.scaling {
	case "kpa":
		cfg := baseline.DefaultKPAConfig(concurrency)
		cfg.StableWindow, cfg.MaxScale = *b.kpaWindow, maxReplicas
		p, err = baseline.NewKPA(cfg, baseline.BacklogConcurrency(maxReplicas*concurrency))
	case "keda":
		b.keda.MaxReplicaCount = maxReplicas
		p, err = baseline.NewKEDA(b.keda, baseline.BacklogLag)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	r.UsePolicy(p)
	return nil
}
