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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// Run watches SluiceJobs and reconciles them until ctx ends.
func (r *Reconciler) Run(ctx context.Context) error {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(r.opts.Dynamic, 0, r.opts.Namespace, nil)
	inf := f.ForResource(JobsResource).Informer()
	q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter(500*time.Millisecond, 30*time.Second))
	defer q.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		// Our own status writes change neither: the poll reads the job
		// store again, not each write.
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
		return fmt.Errorf("watching sluicejobs: %w", err)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	r.log.Info("reconciling sluicejobs", "namespace", r.opts.Namespace, "poll", r.opts.Poll)
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for r.next(ctx, q, inf.GetIndexer()) {
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

// next reconciles the next key of q; false once q is shut down.
func (r *Reconciler) next(ctx context.Context, q workqueue.RateLimitingInterface, idx cache.Indexer) bool {
	item, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(item)
	key := item.(string)
	obj, exists, err := idx.GetByKey(key)
	if err != nil || !exists {
		q.Forget(item)
		return true
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		q.Forget(item)
		return true
	}
	d, err := r.ReconcileJob(ctx, u.DeepCopy())
	switch {
	case err != nil:
		r.log.Warn("reconciling sluicejob", "object", key, "action", d.Action.String(), "err", err)
		q.AddRateLimited(item)
	case d.Active:
		q.Forget(item)
		q.AddAfter(item, r.opts.Poll)
	default:
		q.Forget(item)
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
		case ActAddFinalizer:
			u.SetFinalizers(append(u.GetFinalizers(), Finalizer))
			_, err := r.opts.Dynamic.Resource(JobsResource).Namespace(o.Namespace).Update(ctx, u, metav1.UpdateOptions{})
			return err
		case ActRemoveFinalizer:
			u.SetFinalizers(slices.DeleteFunc(u.GetFinalizers(), func(f string) bool { return f == Finalizer }))
			_, err := r.opts.Dynamic.Resource(JobsResource).Namespace(o.Namespace).Update(ctx, u, metav1.UpdateOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
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
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: TeamKeySecretName(o.Name), Namespace: o.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "sluice-kube-jobs", "sluice.dev/job": o.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: o.Name, UID: u.GetUID(),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{TeamKeySecretKey: teamKeyFile(key)},
	}
	// The key is derived: one a crashed submit created holds the same.
	if _, err := r.opts.Core.CoreV1().Secrets(o.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the team key Secret %s: %w", sec.Name, err)
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
	if m, ok := u.Object["spec"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &o.Spec); err != nil {
			return o, fmt.Errorf("decoding spec: %w", err)
		}
	}
	if m, ok := u.Object["status"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &o.Status); err != nil {
			return o, fmt.Errorf("decoding status: %w", err)
		}
	}
	return o, nil
}
