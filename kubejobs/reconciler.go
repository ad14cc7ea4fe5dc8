package kubejobs

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-project/sluice/broker"
)

// DefaultPoll is how often an active object's status is read from the job
// store and written: well within the 5 s a status may lag.
const DefaultPoll = 2 * time.Second

// workers reconcile objects at once (never one object twice at once:
// the work queue hands a key to one worker).
const workers = 4

// Options configure a Reconciler.
type Options struct {
	// Dynamic reads and writes the objects; Core creates the team key
	// Secrets.
	Dynamic dynamic.Interface
	Core    kubernetes.Interface
	// Broker submits, reads, cancels and deletes jobs: its NATS user
	// needs the admin's rights (delete purges reader positions), its S3
	// client lists datasets, and it should check specs fully
	// (WithSpecCheck(jobspec.Check)).
	Broker *broker.Broker
	// Key derives each job's team key (teamKey): at least MinKeyBytes,
	// secret, the same for every replica of the reconciler and kept
	// across restarts (a new key disowns the jobs submitted under the
	// old one: they are left running, their objects Failed).
	Key []byte
	// Planner sizes a sweep's jobs' pre-warm (nil: each starts with its
	// min_replicas), as `sluice sweep submit` does.
	Planner broker.Planner
	// Namespace limits the objects watched (empty: every namespace).
	Namespace string
	// Poll is how often an active object is read again (0: DefaultPoll).
	Poll time.Duration
}

// Reconciler keeps SluiceJobs and the job store in step: the thin shell
// around DecideJob.
type Reconciler struct {
	opts    Options
	log     *slog.Logger
	results *prometheus.CounterVec
}

// New checks opts and builds a reconciler; logger and reg may be nil.
func New(opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Reconciler, error) {
	if opts.Dynamic == nil || opts.Core == nil || opts.Broker == nil {
		return nil, errors.New("kubejobs: want the Kubernetes clients and a broker")
	}
	if len(opts.Key) < MinKeyBytes {
		return nil, fmt.Errorf("kubejobs: the team key derivation key has %d bytes, want at least %d", len(opts.Key), MinKeyBytes)
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	results := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_kubejobs_reconciles_total",
		Help: "Reconciles of SluiceJob objects, by action and result (ok, error).",
	}, []string{"action", "result"})
	if reg != nil {
		if err := reg.Register(results); err != nil {
			return nil, fmt.Errorf("registering kube-jobs metrics: %w", err)
		}
	}
	return &Reconciler{opts: opts, log: logger, results: results}, nil
}

// item is one object in the work queue.
type item struct {
	sweep bool
	key   string
}

// Run watches SluiceJobs and SluiceSweeps and reconciles them until ctx ends.
func (r *Reconciler) Run(ctx context.Context) error {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(r.opts.Dynamic, 0, r.opts.Namespace, nil)
	q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter(500*time.Millisecond, 30*time.Second))
	defer q.ShutDown()
	indexers := map[bool]cache.Indexer{}
	var synced []cache.InformerSynced
	for _, sweep := range []bool{false, true} {
		res := JobsResource
		if sweep {
			res = SweepsResource
		}
		inf := f.ForResource(res).Informer()
		enqueue := func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				q.Add(item{sweep, key})
			}
		}
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue,
			// Our own status writes change neither: the poll reads the
			// job store again, not each write.
			UpdateFunc: func(old, cur any) {
				o, ok1 := old.(*unstructured.Unstructured)
				c, ok2 := cur.(*unstructured.Unstructured)
				if !ok1 || !ok2 || o.GetGeneration() != c.GetGeneration() ||
					!slices.Equal(o.GetFinalizers(), c.GetFinalizers()) || (o.GetDeletionTimestamp() == nil) != (c.GetDeletionTimestamp() == nil) {
					enqueue(cur)
				}
			},
			DeleteFunc: enqueue,
		})
		if err != nil {
			return fmt.Errorf("watching %s: %w", res.Resource, err)
		}
		indexers[sweep] = inf.GetIndexer()
		synced = append(synced, inf.HasSynced)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	r.log.Info("reconciling sluicejobs and sluicesweeps", "namespace", r.opts.Namespace, "poll", r.opts.Poll)
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for r.next(ctx, q, indexers) {
			}
		}()
	}
	<-ctx.Done()
	q.ShutDown()
	for range workers {
		<-done
	}
	return nil
}

// next reconciles the next item of q; false once q is shut down.
func (r *Reconciler) next(ctx context.Context, q workqueue.RateLimitingInterface, indexers map[bool]cache.Indexer) bool {
	it, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(it)
	i := it.(item)
	obj, exists, err := indexers[i.sweep].GetByKey(i.key)
	u, ok := obj.(*unstructured.Unstructured)
	if err != nil || !exists || !ok {
		q.Forget(it)
		return true
	}
	var action Action
	var active bool
	if i.sweep {
		action, active, err = r.ReconcileSweep(ctx, u.DeepCopy())
	} else {
		var d JobDecision
		d, err = r.ReconcileJob(ctx, u.DeepCopy())
		action, active = d.Action, d.Active
	}
	switch {
	case err != nil:
		r.log.Warn("reconciling", "object", i.key, "sweep", i.sweep, "action", action.String(), "err", err)
		q.AddRateLimited(it)
	case active:
		q.Forget(it)
		q.AddAfter(it, r.opts.Poll)
	default:
		q.Forget(it)
	}
	return true
}

// ReconcileJob reads what the job store holds for u, decides (DecideJob),
// acts and writes the status where it changed. It returns the decision
// and the error of the action or the status write.
func (r *Reconciler) ReconcileJob(ctx context.Context, u *unstructured.Unstructured) (JobDecision, error) {
	o, err := jobObject(u)
	if err != nil {
		return JobDecision{}, err
	}
	var rec JobRecord
	id, idErr := o.ID()
	if idErr == nil && (o.Finalized || o.Deleting) {
		if rec, err = r.readJob(ctx, o, id); err != nil {
			return JobDecision{}, err
		}
	}
	d := DecideJob(o, rec)
	act := func() error {
		switch d.Action {
		case ActAddFinalizer, ActRemoveFinalizer:
			return r.setFinalizer(ctx, JobsResource, u, d.Action == ActAddFinalizer)
		case ActSubmit:
			if err := r.submit(ctx, u, o, id); err != nil {
				// Said in the status; tried again with backoff.
				d.Status = SubmitFailed(d.Status, err)
				return err
			}
		case ActCancel:
			if _, err := r.opts.Broker.Cancel(ctx, id, "SluiceJob "+o.Namespace+"/"+o.Name+" deleted"); err != nil && !errors.Is(err, broker.ErrTransition) {
				return err
			}
			r.log.Info("job cancelled: its object is deleted", "job", id)
		case ActDelete:
			if err := r.opts.Broker.Delete(ctx, id, false); err != nil && !errors.Is(err, broker.ErrJobNotFound) {
				return err
			}
		}
		return nil
	}
	aerr := act()
	r.count(d.Action, aerr)
	if d.Action == ActAddFinalizer || d.Action == ActRemoveFinalizer || o.Deleting {
		return d, aerr // the object changed (or goes): its status is written next time
	}
	if !reflect.DeepEqual(d.Status, o.Status) {
		if err := r.writeStatus(ctx, u, d.Status); err != nil {
			return d, errors.Join(aerr, err)
		}
	}
	return d, aerr
}

// count counts one reconcile's action and result.
func (r *Reconciler) count(a Action, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	r.results.WithLabelValues(a.String(), result).Inc()
}

// readJob reads the job store under id and whether the record is the object's.
func (r *Reconciler) readJob(ctx context.Context, o JobObject, id string) (JobRecord, error) {
	job, st, err := r.opts.Broker.Status(ctx, id)
	if errors.Is(err, broker.ErrJobNotFound) {
		return JobRecord{}, nil
	}
	if err != nil {
		return JobRecord{}, fmt.Errorf("reading job %s: %w", id, err)
	}
	want := agentAuth(teamKey(r.opts.Key, o.UID, id))
	ours := subtle.ConstantTimeCompare([]byte(job.AgentAuth), []byte(want)) == 1
	return JobRecord{Found: true, Ours: ours, Job: job, Status: st}, nil
}

// submit creates the team key's Secret (owned by the object, so it goes
// with it), then submits the job with the key.
func (r *Reconciler) submit(ctx context.Context, u *unstructured.Unstructured, o JobObject, id string) error {
	key := teamKey(r.opts.Key, o.UID, id)
	if err := r.createKeySecret(ctx, u, map[string][]byte{TeamKeySecretKey: teamKeyFile(key)}); err != nil {
		return err
	}
	if _, err := r.opts.Broker.Submit(ctx, o.Spec.Wire(id), broker.WithTeamKey(key)); err != nil {
		return err
	}
	r.log.Info("job submitted for its object", "job", id, "namespace", o.Namespace, "name", o.Name)
	return nil
}

// writeStatus writes st as u's status (on u's resource version).
func (r *Reconciler) writeStatus(ctx context.Context, u *unstructured.Unstructured, st JobStatus) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return fmt.Errorf("encoding status: %w", err)
	}
	u.Object["status"] = m
	if _, err := r.opts.Dynamic.Resource(JobsResource).Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	return nil
}

// jobObject reads what DecideJob needs of u.
func jobObject(u *unstructured.Unstructured) (JobObject, error) {
	o := JobObject{
		Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), Generation: u.GetGeneration(),
		Deleting: u.GetDeletionTimestamp() != nil, Finalized: slices.Contains(u.GetFinalizers(), Finalizer),
	}
	if err := decodeInto(u, "spec", &o.Spec); err != nil {
		return o, err
	}
	if err := decodeInto(u, "status", &o.Status); err != nil {
		return o, err
	}
	return o, nil
}
