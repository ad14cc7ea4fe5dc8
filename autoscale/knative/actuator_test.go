package knative

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"knative.dev/serving/pkg/client/clientset/versioned/fake"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/internal/testenv"
)

const testNS = "sluice"

// fakeCluster is the function Service with one Revision of ready pods, in
// client-go's fake clientset, which records every request.
func fakeCluster(t *testing.T, ready int32) (*fake.Clientset, *Actuator) {
	t.Helper()
	svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: DefaultService, Namespace: testNS, Generation: 1}}
	cc := int64(4)
	svc.Spec.Template.Spec.ContainerConcurrency = &cc
	svc.Spec.Template.Annotations = map[string]string{
		"autoscaling.knative.dev/target":                        "4",
		"autoscaling.knative.dev/target-utilization-percentage": "100",
		"autoscaling.knative.dev/min-scale":                     "0",
		"autoscaling.knative.dev/max-scale":                     "16",
	}
	u, _ := apis.ParseURL("http://sluice-fn.sluice.svc.cluster.local")
	svc.Status.Address = &duckv1.Addressable{URL: u}
	rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: DefaultService + "-00001", Namespace: testNS,
		Labels: map[string]string{"serving.knative.dev/service": DefaultService}}}
	rev.Status.ActualReplicas = &ready
	other := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: "other-00001", Namespace: testNS,
		Labels: map[string]string{"serving.knative.dev/service": "other"}}}
	n := int32(9)
	other.Status.ActualReplicas = &n
	cs := fake.NewSimpleClientset(svc, rev, other)
	// No wake: the Service's address is not on loopback (TestWakeFromZero).
	a, err := New(cs.ServingV1(), Options{Namespace: testNS, Concurrency: 4, MaxScale: 16, WakeTimeout: -1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs, a
}

func patches(cs *fake.Clientset) int {
	n := 0
	for _, act := range cs.Actions() {
		if _, ok := act.(k8stesting.PatchAction); ok {
			n++
		}
	}
	return n
}

func TestScaleWritesNothingAndSizesTheDispatcher(t *testing.T) {
	ctx := context.Background()
	cs, a := fakeCluster(t, 3)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(cs.Actions())
	for i := range 50 {
		if err := a.Scale(ctx, "j1", 1+i%5); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Scale(ctx, "j1", 4); err != nil {
		t.Fatal(err)
	}
	if err := a.Scale(ctx, "j2", 2); err != nil {
		t.Fatal(err)
	}
	if got := len(cs.Actions()) - before; got != 0 {
		t.Errorf("Scale made %d requests to the API server, want none", got)
	}
	if got := a.Requested().Ready("j1"); got != 4 {
		t.Errorf("dispatcher capacity of j1 = %d replicas, want the 4 requested", got)
	}
	// 3 pods ready (the other Service's 9 are not counted), shared 4:2.
	if got := a.ReadyTotal(); got != 3 {
		t.Errorf("ReadyTotal = %d, want 3", got)
	}
	if r1, r2 := a.Ready("j1"), a.Ready("j2"); r1 != 2 || r2 != 1 {
		t.Errorf("Ready = %d, %d; want 2, 1", r1, r2)
	}
	if eps := a.Endpoints("j1"); len(eps) != 1 || eps[0] != "http://sluice-fn.sluice.svc.cluster.local" {
		t.Errorf("Endpoints = %q, want the Service's cluster-local address", eps)
	}
	if err := a.Scale(ctx, "j2", 0); err != nil {
		t.Fatal(err)
	}
	if got := a.Requested().Ready("j2"); got != 0 {
		t.Errorf("after Scale 0: capacity %d, want 0", got)
	}
	if got := a.Ready("j1"); got != 3 {
		t.Errorf("j1 alone: Ready %d, want 3", got)
	}
	if err := a.Scale(ctx, "j1", -1); err == nil {
		t.Error("Scale -1: want an error")
	}
}

func TestBoundsChangeOnlyWhenJobsStartAndEnd(t *testing.T) {
	ctx := context.Background()
	cs, a := fakeCluster(t, 0)
	minScale := func() string {
		s, err := cs.ServingV1().Services(testNS).Get(ctx, DefaultService, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Spec.Template.Annotations["autoscaling.knative.dev/min-scale"]
	}
	steps := []struct {
		do          func() error
		wantMin     string
		wantPatches int
	}{
		{func() error { return a.StartJob(ctx, "a", autoscale.JobBounds{MinReplicas: 0, MaxReplicas: 8}) }, "0", 0},
		{func() error { return a.StartJob(ctx, "b", autoscale.JobBounds{MinReplicas: 2, MaxReplicas: 8}) }, "2", 1},
		{func() error { return a.StartJob(ctx, "c", autoscale.JobBounds{MinReplicas: 1, MaxReplicas: 8}) }, "3", 2},
		{func() error { return a.EndJob(ctx, "a") }, "3", 2},
		{func() error { return a.EndJob(ctx, "b") }, "1", 3},
		{func() error { return a.EndJob(ctx, "b") }, "1", 3}, // again: nothing
		{func() error { return a.EndJob(ctx, "c") }, "0", 4},
	}
	for i, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		// Ticks in between change nothing in the cluster.
		for range 10 {
			_ = a.Scale(ctx, "b", 3)
		}
		if got := minScale(); got != s.wantMin {
			t.Errorf("step %d: min-scale %q, want %q", i, got, s.wantMin)
		}
		if got := patches(cs); got != s.wantPatches {
			t.Errorf("step %d: %d patches, want %d", i, got, s.wantPatches)
		}
	}
}

func TestMaxScaleSetOnceAtTheFirstJob(t *testing.T) {
	ctx := context.Background()
	cs, _ := fakeCluster(t, 0)
	a, err := New(cs.ServingV1(), Options{Namespace: testNS, Concurrency: 4, MaxScale: 6, WakeTimeout: -1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"a", "b", "c"} {
		if err := a.StartJob(ctx, job, autoscale.JobBounds{MaxReplicas: 6}); err != nil {
			t.Fatal(err)
		}
	}
	if got := patches(cs); got != 1 {
		t.Errorf("%d patches, want 1 (max-scale 16 -> 6 at the first job)", got)
	}
	s, _ := cs.ServingV1().Services(testNS).Get(ctx, DefaultService, metav1.GetOptions{})
	if got := s.Spec.Template.Annotations["autoscaling.knative.dev/max-scale"]; got != "6" {
		t.Errorf("max-scale %q, want 6", got)
	}
}

func TestSyncFailsOnAMissingService(t *testing.T) {
	cs := fake.NewSimpleClientset()
	a, err := New(cs.ServingV1(), Options{Namespace: testNS}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(context.Background()); err == nil {
		t.Fatal("Sync without the Service: want an error")
	}
	if _, err := New(cs.ServingV1(), Options{}, nil, nil); err == nil {
		t.Error("New without a namespace: want an error")
	}
}

// TestWakeFromZero: the first job to ask for replicas while the Service
// has no ready pod sends it one request at once (Knative's activator then
// starts a pod before the job's agents send); not while one is in flight,
// not with pods ready, and not for a job that had replicas already.
func TestWakeFromZero(t *testing.T) {
	ctx := context.Background()
	hold := make(chan struct{})
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/readyz" {
			t.Errorf("wake to %s, want /readyz", r.URL.Path)
		}
		<-hold // the activator holds it until a pod is ready
	}))
	defer srv.Close()
	cs, _ := fakeCluster(t, 0)
	a, err := New(cs.ServingV1(), Options{Namespace: testNS, Concurrency: 4, URL: srv.URL}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		job string
		n   int
	}{{"j1", 1}, {"j1", 3}, {"j2", 2}} { // one wake in flight at a time
		if err := a.Scale(ctx, step.job, step.n); err != nil {
			t.Fatal(err)
		}
	}
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := hits.Load(); n != 1 {
			return fmt.Errorf("%d wakes, want 1", n)
		}
		return nil
	})
	close(hold)
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.waking {
			return fmt.Errorf("the wake is still in flight")
		}
		return nil
	})
	// A new job at zero ready pods wakes again; one with replicas does not.
	if err := a.Scale(ctx, "j3", 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Scale(ctx, "j1", 2); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := hits.Load(); n != 2 {
			return fmt.Errorf("%d wakes, want 2", n)
		}
		return nil
	})
	if bad := (Options{Namespace: testNS, WakeTimeout: time.Hour}).validate(); bad == nil {
		t.Error("a wake timeout of an hour: want an error")
	}
}

// With KPAAlone (the baseline), the actuator leaves the Service to the
// KPA: no wake from zero, no requested replicas, no bounds patched.
func TestKPAAloneLeavesTheServiceToTheKPA(t *testing.T) {
	ctx := context.Background()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	cs, _ := fakeCluster(t, 0)
	a, err := New(cs.ServingV1(), Options{Namespace: testNS, Concurrency: 4, MaxScale: 6, URL: srv.URL, KPAAlone: true}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.StartJob(ctx, "j1", autoscale.JobBounds{MinReplicas: 2, MaxReplicas: 8}); err != nil {
		t.Fatal(err)
	}
	if err := a.Scale(ctx, "j1", 3); err != nil {
		t.Fatal(err)
	}
	if err := a.EndJob(ctx, "j1"); err != nil {
		t.Fatal(err)
	}
	if got := patches(cs); got != 0 {
		t.Errorf("%d patches of the Service, want none", got)
	}
	if got := a.Requested().Ready("j1"); got != 0 {
		t.Errorf("requested %d replicas, want none", got)
	}
	// Give a wake, had one been sent, time to arrive.
	time.Sleep(50 * time.Millisecond)
	if n := hits.Load(); n != 0 {
		t.Errorf("%d wakes, want none", n)
	}
}
