package knative

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	servingv1client "knative.dev/serving/pkg/client/clientset/versioned/typed/serving/v1"

	"github.com/sluice-project/sluice/autoscale"
)

// Actuator runs every job's replicas as pods of one Knative Service; see
// the package documentation.
type Actuator struct {
	client servingv1client.ServingV1Interface
	opts   Options
	log    *slog.Logger
	m      *metrics

	patchMu sync.Mutex // one template change at a time, in job order

	mu        sync.Mutex
	requested map[string]int // last Scale per job, > 0 only
	mins      map[string]int // MinReplicas of the jobs started and not ended
	ready     int            // ready pods over the Service's Revisions
	revisions int            // Revisions of the Service seen at the last sync
	url       string
	scale     scaleBounds // min/max-scale of the template as last read or written
	synced    bool
	warned    int64 // generation whose CheckService problems were logged
	waking    bool  // a wake request is in flight

	hc   *http.Client    // the wake's
	life context.Context // Run's, which ends a wake in flight
}

// scaleBounds are the template's min-scale and max-scale annotations.
type scaleBounds struct {
	min, max int
}

var (
	_ autoscale.Actuator     = (*Actuator)(nil)
	_ autoscale.JobLifecycle = (*Actuator)(nil)
)

// New creates an actuator for the Service opts names, reached through
// client; call Sync once to check it exists, then Run. logger and reg may
// be nil.
func New(client servingv1client.ServingV1Interface, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Actuator, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, fmt.Errorf("knative actuator: a serving client is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Actuator{
		client: client, opts: opts, m: newMetrics(reg),
		log:       logger.With("service", opts.Namespace+"/"+opts.Service),
		requested: map[string]int{},
		mins:      map[string]int{},
		hc:        &http.Client{Timeout: opts.WakeTimeout},
		life:      context.Background(),
	}, nil
}

// Scale sets how many replicas job is to have. It writes nothing to the
// cluster: the job's agents keep n x Options.Concurrency requests in
// flight (the controller's dispatch plan, sized by Requested), and the KPA
// follows them.
func (a *Actuator) Scale(ctx context.Context, job string, n int) error {
	if n < 0 {
		return fmt.Errorf("scaling job %s: %d replicas: want >= 0", job, n)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if a.opts.KPAAlone {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if n == 0 {
		delete(a.requested, job)
		a.m.requested.DeleteLabelValues(job)
		return nil
	}
	if a.requested[job] == 0 && a.ready == 0 && a.url != "" && !a.waking && a.opts.WakeTimeout > 0 {
		a.waking = true
		go a.wake(a.life, a.url)
	}
	a.requested[job] = n
	a.m.requested.WithLabelValues(job).Set(float64(n))
	return nil
}

// wake sends one request to the Service at zero pods, so that Knative's
// activator starts a pod at once rather than when the job's first task
// comes: an agent starting beside its trainer takes a few tenths of a
// second to connect and send, which the cold start would otherwise add
// (docs/knative.md). Any answer will do (the function refuses a request
// without its token): the pod has started by then.
func (a *Actuator) wake(ctx context.Context, url string) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err == nil {
		var resp *http.Response
		if resp, err = a.hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
		}
	}
	a.mu.Lock()
	a.waking = false
	a.mu.Unlock()
	if err != nil {
		a.m.wakes.WithLabelValues("failed").Inc()
		a.log.Warn("waking the function Service from zero", "err", err)
		return
	}
	a.m.wakes.WithLabelValues("answered").Inc()
	a.log.Debug("woke the function Service from zero", "took", time.Since(start).Round(time.Millisecond))
}

// Ready is job's share of the Service's ready pods (ShareReady).
func (a *Actuator) Ready(job string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.requested[job] == 0 {
		return 0
	}
	return ShareReady(a.requested, a.ready)[job]
}

// ReadyTotal is the Service's ready pods, over all jobs.
func (a *Actuator) ReadyTotal() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ready
}

// Revisions is the number of the Service's Revisions at the last sync.
func (a *Actuator) Revisions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.revisions
}

// Endpoints is the Service's URL for every job, once known.
func (a *Actuator) Endpoints(string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.url == "" {
		return nil
	}
	return []string{a.url}
}

// SharedEndpoint says that the one endpoint stands for every pod: a
// dispatch plan gives it the job's whole in-flight budget (no per-endpoint
// limit), and Knative's routing picks the pod.
func (a *Actuator) SharedEndpoint() bool { return true }

// ReadyCounter counts a job's replicas (autoscale.Actuator's Ready alone).
type ReadyCounter interface {
	Ready(job string) int
}

// Requested sizes a job's in-flight budget (the dispatch plan): its
// Ready(job) is the replicas the job requested, not those that serve, so
// the job's agents keep requests in flight through a cold start (the
// activator holds them) and the KPA sees the concurrency it is to provide
// for.
func (a *Actuator) Requested() ReadyCounter { return requested{a} }

type requested struct{ a *Actuator }

func (r requested) Ready(job string) int {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	return r.a.requested[job]
}

// StartJob records job's bounds; if the running jobs now need a higher
// min-scale (or max-scale differs from Options.MaxScale) the Service's
// template is patched, which makes one Revision.
func (a *Actuator) StartJob(ctx context.Context, job string, b autoscale.JobBounds) error {
	if a.opts.KPAAlone {
		return nil
	}
	a.mu.Lock()
	a.mins[job] = b.MinReplicas
	a.mu.Unlock()
	return a.applyBounds(ctx, "job "+job+" started")
}

// EndJob forgets job; if the floor drops, the template is patched.
func (a *Actuator) EndJob(ctx context.Context, job string) error {
	a.mu.Lock()
	_, ok := a.mins[job]
	delete(a.mins, job)
	delete(a.requested, job)
	a.m.requested.DeleteLabelValues(job)
	a.mu.Unlock()
	if !ok {
		return nil
	}
	return a.applyBounds(ctx, "job "+job+" ended")
}

// applyBounds patches min-scale and max-scale when they differ from what
// the running jobs need.
func (a *Actuator) applyBounds(ctx context.Context, why string) error {
	a.patchMu.Lock()
	defer a.patchMu.Unlock()
	if err := a.syncIfNeeded(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	want := scaleBounds{min: Floor(a.mins, a.opts.MaxScale), max: a.scale.max}
	if a.opts.MaxScale > 0 {
		want.max = a.opts.MaxScale
	}
	have := a.scale
	a.mu.Unlock()
	if want == have {
		return nil
	}
	if err := a.patchBounds(ctx, want); err != nil {
		return err
	}
	a.mu.Lock()
	a.scale = want
	a.mu.Unlock()
	a.m.patches.Inc()
	a.log.Info("changed the function's scale bounds (a new Revision)", "why", why,
		"min_scale", want.min, "max_scale", want.max, "was_min", have.min, "was_max", have.max)
	return nil
}

// syncIfNeeded reads the Service once before the first patch, so the
// bounds compared are the cluster's; a.patchMu is held.
func (a *Actuator) syncIfNeeded(ctx context.Context) error {
	a.mu.Lock()
	synced := a.synced
	a.mu.Unlock()
	if synced {
		return nil
	}
	return a.Sync(ctx)
}

// Run reads the Service and its Revisions every Options.Poll until ctx
// ends; a failed read is logged and the last known state kept.
func (a *Actuator) Run(ctx context.Context) {
	a.mu.Lock()
	a.life = ctx
	a.mu.Unlock()
	t := time.NewTicker(a.opts.Poll)
	defer t.Stop()
	failing := false
	for {
		if err := a.Sync(ctx); err != nil && ctx.Err() == nil {
			if !failing {
				a.log.Warn("reading the function Service; keeping its last known state", "err", err)
			}
			failing = true
		} else if failing {
			a.log.Info("reading the function Service again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
