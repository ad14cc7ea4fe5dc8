package k8senv

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingv1client "knative.dev/serving/pkg/client/clientset/versioned/typed/serving/v1"
)

// KnativeOptions tune FakeKnative; zero values take the defaults noted.
type KnativeOptions struct {
	// ColdStart is how long a new pod takes to become ready (default 300ms).
	ColdStart time.Duration
	// Window is how long the highest recent want is kept before scaling
	// down, the KPA's stable window (default 500ms).
	Window time.Duration
	// Grace is how long a revision with no requests keeps its last pod,
	// the scale-to-zero grace period (default 500ms).
	Grace time.Duration
	// Tick is the loop's period (default 25ms).
	Tick time.Duration
}

// Sample is what FakeKnative saw at one tick.
type Sample struct {
	At                      time.Time
	InFlight, Desired, Pods int
	Ready                   int
}

// FakeKnative plays Knative Serving's controllers for one Service against
// the real API server, as far as Sluice's actuator can tell: a new
// Revision for every new generation of the Service (its template changed),
// the Service's status (URL, address, latest revisions, Ready), and the
// latest Revision's status.actualReplicas. Its route is an HTTP server on
// loopback (the Service's URL): it counts the requests in flight, holds
// them while no pod is ready (the activator), lets each ready pod take
// containerConcurrency at once (the queue-proxy) and hands them to
// Backend. Its autoscaler is a plain KPA: ceil(in flight / target) within
// min-scale and max-scale, the highest want of the last Window kept, zero
// only after Grace without requests.
type FakeKnative struct {
	client  servingv1client.ServingV1Interface
	ns, svc string
	opts    KnativeOptions
	backend http.Handler
	url     string

	mu        sync.Mutex
	cond      *sync.Cond
	observed  int64 // Service generation turned into a Revision
	revision  string
	revisions int
	target    int
	minScale  int
	maxScale  int
	inflight  int
	active    int
	pods      []time.Time // ready times, oldest first
	wants     []Sample
	lastBusy  time.Time
	history   []Sample
	lastRev   [2]int // actual, desired last written
	err       error
}

// StartKnative starts the fake for Service ns/name, sending requests to
// backend, until t ends. client must be allowed to read Services and write
// Revisions and statuses (the administrator).
func StartKnative(t testing.TB, client servingv1client.ServingV1Interface, ns, name string, backend http.Handler, o KnativeOptions) *FakeKnative {
	t.Helper()
	if o.ColdStart == 0 {
		o.ColdStart = 300 * time.Millisecond
	}
	if o.Window == 0 {
		o.Window = 500 * time.Millisecond
	}
	if o.Grace == 0 {
		o.Grace = 500 * time.Millisecond
	}
	if o.Tick == 0 {
		o.Tick = 25 * time.Millisecond
	}
	k := &FakeKnative{client: client, ns: ns, svc: name, opts: o, backend: backend, target: 1}
	k.cond = sync.NewCond(&k.mu)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k.url = "http://" + ln.Addr().String()
	hs := &http.Server{Handler: http.HandlerFunc(k.route), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.loop(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		k.mu.Lock()
		k.pods = []time.Time{time.Now()} // release held requests
		k.cond.Broadcast()
		k.mu.Unlock()
		hs.Close()
	})
	return k
}

// URL is the route's address, the Service's status.url and address.
func (k *FakeKnative) URL() string { return k.url }

// Revisions counts the Revisions the fake created.
func (k *FakeKnative) Revisions() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.revisions
}

// History is every tick's sample so far.
func (k *FakeKnative) History() []Sample {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Sample(nil), k.history...)
}

// Err is the last error talking to the API server, nil if none.
func (k *FakeKnative) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

func (k *FakeKnative) route(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.inflight++
	k.lastBusy = time.Now()
	for k.active >= k.readyLocked(time.Now())*k.target {
		k.cond.Wait()
	}
	k.active++
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.active--
		k.inflight--
		k.lastBusy = time.Now()
		k.cond.Broadcast()
		k.mu.Unlock()
	}()
	k.backend.ServeHTTP(w, r)
}

func (k *FakeKnative) readyLocked(now time.Time) int {
	n := 0
	for _, at := range k.pods {
		if !at.After(now) {
			n++
		}
	}
	return n
}

func (k *FakeKnative) loop(ctx context.Context) {
	t := time.NewTicker(k.opts.Tick)
	defer t.Stop()
	for {
		if err := k.reconcile(ctx, time.Now()); err != nil && ctx.Err() == nil {
			k.mu.Lock()
			k.err = err
			k.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reconcile is one round: a Revision for a new generation, then the
// autoscaler, then the statuses.
func (k *FakeKnative) reconcile(ctx context.Context, now time.Time) error {
	svc, err := k.client.Services(k.ns).Get(ctx, k.svc, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if svc.Generation != k.observed {
		if err := k.newRevision(ctx, svc); err != nil {
			return err
		}
	}
	k.mu.Lock()
	want := int(math.Ceil(float64(k.inflight) / float64(k.target)))
	if want == 0 && len(k.pods) > 0 && now.Sub(k.lastBusy) < k.opts.Grace {
		want = 1
	}
	k.wants = append(k.wants, Sample{At: now, Desired: want})
	for len(k.wants) > 0 && now.Sub(k.wants[0].At) > k.opts.Window {
		k.wants = k.wants[1:]
	}
	desired := 0
	for _, w := range k.wants {
		desired = max(desired, w.Desired)
	}
	desired = max(desired, k.minScale)
	if k.maxScale > 0 {
		desired = min(desired, k.maxScale)
	}
	for len(k.pods) < desired {
		k.pods = append(k.pods, now.Add(k.opts.ColdStart))
	}
	if len(k.pods) > desired {
		k.pods = k.pods[:desired] // the newest go first
	}
	ready := k.readyLocked(now)
	k.cond.Broadcast()
	k.history = append(k.history, Sample{At: now, InFlight: k.inflight, Desired: desired, Pods: len(k.pods), Ready: ready})
	rev, last := k.revision, k.lastRev
	k.mu.Unlock()

	if rev == "" || last == [2]int{ready, desired} {
		return nil
	}
	r, err := k.client.Revisions(k.ns).Get(ctx, rev, metav1.GetOptions{})
	if err != nil {
		return err
	}
	a, d := int32(ready), int32(desired)
	r.Status.ActualReplicas, r.Status.DesiredReplicas = &a, &d
	if _, err := k.client.Revisions(k.ns).UpdateStatus(ctx, r, metav1.UpdateOptions{}); err != nil {
		return err
	}
	k.mu.Lock()
	k.lastRev = [2]int{ready, desired}
	k.mu.Unlock()
	return nil
}

// newRevision creates the Revision of svc's current generation and points
// the Service's status at it; the old Revision's pods go (the fake moves
// all traffic at once).
func (k *FakeKnative) newRevision(ctx context.Context, svc *servingv1.Service) error {
	k.mu.Lock()
	n, old := k.revisions+1, k.revision
	k.mu.Unlock()
	name := fmt.Sprintf("%s-%05d", k.svc, n)
	if old != "" {
		// The old Revision's pods are the new one's now: it reports none,
		// or a reader summing over Revisions would count them twice.
		if r, err := k.client.Revisions(k.ns).Get(ctx, old, metav1.GetOptions{}); err == nil {
			zero := int32(0)
			r.Status.ActualReplicas, r.Status.DesiredReplicas = &zero, &zero
			if _, err := k.client.Revisions(k.ns).UpdateStatus(ctx, r, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("retiring revision %s: %w", old, err)
			}
		}
	}
	tmpl := svc.Spec.Template
	rev := &servingv1.Revision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns,
			Labels:      map[string]string{"serving.knative.dev/service": k.svc, "serving.knative.dev/configuration": k.svc},
			Annotations: tmpl.Annotations},
		Spec: tmpl.Spec,
	}
	if _, err := k.client.Revisions(k.ns).Create(ctx, rev, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating revision %s: %w", name, err)
	}
	u, _ := apis.ParseURL(k.url)
	svc.Status.ObservedGeneration = svc.Generation
	svc.Status.LatestCreatedRevisionName, svc.Status.LatestReadyRevisionName = name, name
	svc.Status.URL = u
	svc.Status.Address = &duckv1.Addressable{URL: u}
	svc.Status.Conditions = duckv1.Conditions{{Type: apis.ConditionReady, Status: "True", LastTransitionTime: apis.VolatileTime{Inner: metav1.Now()}}}
	if _, err := k.client.Services(k.ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating status of service %s: %w", k.svc, err)
	}
	atoi := func(key string) int {
		v, _ := strconv.Atoi(tmpl.Annotations[key])
		return v
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.observed, k.revision, k.revisions = svc.Generation, name, n
	k.minScale = atoi("autoscaling.knative.dev/min-scale")
	k.maxScale = atoi("autoscaling.knative.dev/max-scale")
	k.target = 1
	if tmpl.Spec.ContainerConcurrency != nil && *tmpl.Spec.ContainerConcurrency > 0 {
		k.target = int(*tmpl.Spec.ContainerConcurrency)
	}
	k.lastRev = [2]int{-1, -1}
	return nil
}
