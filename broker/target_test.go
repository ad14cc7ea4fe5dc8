package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

func testTask(shard int) wire.ShardTask {
	return wire.ShardTask{Job: "jt", Epoch: 1, Shard: shard, Bucket: "data", Key: fmt.Sprintf("ds/shard-%06d.tar", shard),
		Pipeline: "image-classification", Seed: 3, ChunkMaxBytes: wire.DefaultChunkMaxBytes, OutputSubject: wire.OutputSubject("jt")}
}

// fnServer plays a function replica: it decodes the task event with the
// CloudEvents SDK and answers with a result event, or with status when the
// reply func says so.
type fnServer struct {
	*httptest.Server
	reply func(task wire.ShardTask) (status int, body string)
	// resultType overrides the reply event's type.
	resultType string

	mu     sync.Mutex
	events []event.Event
	tasks  []wire.ShardTask
	errs   []error
}

func newFnServer(t *testing.T, reply func(wire.ShardTask) (int, string)) *fnServer {
	f := &fnServer{reply: reply}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fnServer) serve(w http.ResponseWriter, r *http.Request) {
	msg := cehttp.NewMessageFromHttpRequest(r)
	fail := func(err error) {
		f.mu.Lock()
		f.errs = append(f.errs, err)
		f.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
	if enc := msg.ReadEncoding(); enc != binding.EncodingBinary {
		fail(fmt.Errorf("event encoding %v, want binary", enc))
		return
	}
	ev, err := binding.ToEvent(r.Context(), msg)
	if err != nil {
		fail(err)
		return
	}
	var task wire.ShardTask
	if err := ev.DataAs(&task); err != nil {
		fail(err)
		return
	}
	f.mu.Lock()
	f.events = append(f.events, *ev)
	f.tasks = append(f.tasks, task)
	f.mu.Unlock()
	if f.reply != nil {
		if status, body := f.reply(task); status != http.StatusOK {
			http.Error(w, body, status)
			return
		}
	}
	res := event.New()
	res.SetID("result-" + ev.ID())
	res.SetType(wire.EventTypeShardResult)
	if f.resultType != "" {
		res.SetType(f.resultType)
	}
	res.SetSource("sluice/fn")
	if err := res.SetData(event.ApplicationJSON, wire.ShardResult{Task: task.ID(), Samples: 7, Chunks: 2, Bytes: 4096,
		Failed: []wire.FailedSample{{Key: "00000003", Reason: "corrupt jpeg"}}}); err != nil {
		fail(err)
		return
	}
	if err := cehttp.WriteResponseWriter(r.Context(), binding.ToMessage(&res), http.StatusOK, w); err != nil {
		fail(err)
	}
}

func (f *fnServer) received() ([]event.Event, []wire.ShardTask, []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]event.Event(nil), f.events...), append([]wire.ShardTask(nil), f.tasks...), append([]error(nil), f.errs...)
}

func endpoints(urls ...string) Replicas { return StaticEndpoints(urls) }

func TestCloudEventsTargetSendsTaskEventAndDecodesResult(t *testing.T) {
	fn := newFnServer(t, nil)
	target := NewCloudEventsTarget("j", endpoints(fn.URL), &http.Client{Timeout: 10 * time.Second})
	task := testTask(4)
	res, err := target.Send(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	want := wire.ShardResult{Task: task.ID(), Samples: 7, Chunks: 2, Bytes: 4096,
		Failed: []wire.FailedSample{{Key: "00000003", Reason: "corrupt jpeg"}}}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	evs, tasks, errs := fn.received()
	if len(errs) > 0 || len(evs) != 1 {
		t.Fatalf("function got %d events, errors %v", len(evs), errs)
	}
	ev := evs[0]
	if ev.Type() != wire.EventTypeShardTask || ev.Source() != wire.EventSource || ev.ID() != task.ID() ||
		ev.Subject() != task.Key || ev.DataContentType() != event.ApplicationJSON || ev.SpecVersion() != event.CloudEventsVersionV1 {
		t.Errorf("event attributes: %s", ev.String())
	}
	if diff := cmp.Diff(task, tasks[0]); diff != "" {
		t.Errorf("task in event (-sent +received):\n%s", diff)
	}
}

func TestCloudEventsTargetClassifiesFailures(t *testing.T) {
	for _, c := range []struct {
		status    int
		permanent bool
	}{
		{http.StatusBadRequest, true},
		{http.StatusNotFound, true},
		{http.StatusRequestEntityTooLarge, true},
		{http.StatusUnsupportedMediaType, true},
		{http.StatusTooManyRequests, false},
		{http.StatusInternalServerError, false},
		{http.StatusBadGateway, false},
		{http.StatusServiceUnavailable, false},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			body := fmt.Sprintf("pipeline says no (%d)", c.status)
			fn := newFnServer(t, func(wire.ShardTask) (int, string) { return c.status, body })
			_, err := NewCloudEventsTarget("j", endpoints(fn.URL), nil).Send(context.Background(), testTask(1))
			if err == nil {
				t.Fatal("no error")
			}
			if IsPermanent(err) != c.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, IsPermanent(err), c.permanent)
			}
			if !strings.Contains(err.Error(), body) || !strings.Contains(err.Error(), fmt.Sprint(c.status)) ||
				!strings.Contains(err.Error(), testTask(1).ID()) {
				t.Errorf("error %q does not name the task, the status and the reply", err)
			}
			var perr *PermanentError
			if c.permanent && (!errors.As(err, &perr) || perr.StatusCode != c.status || perr.Body != body) {
				t.Errorf("error %#v: want a *PermanentError with status %d and body %q", err, c.status, body)
			}
		})
	}
}

func TestCloudEventsTargetTransportFailuresAreTransient(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close() // connection refused from now on

	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer plain.Close()
	wrongType := newFnServer(t, nil)
	wrongType.resultType = "dev.sluice.something.else"

	for name, c := range map[string]struct {
		endpoints []string
		is        error
	}{
		"connection refused": {endpoints: []string{url}},
		"2xx without event":  {endpoints: []string{plain.URL}},
		"no endpoints":       {is: ErrNoReplica},
		"wrong reply type":   {endpoints: []string{wrongType.URL}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewCloudEventsTarget("j", endpoints(c.endpoints...), nil).Send(context.Background(), testTask(2))
			if err == nil || IsPermanent(err) {
				t.Fatalf("err = %v, want a transient error", err)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("err = %v, want %v", err, c.is)
			}
		})
	}
}

func TestCloudEventsTargetPrefersLeastBusyReplica(t *testing.T) {
	release := make(chan struct{})
	busy := newFnServer(t, func(wire.ShardTask) (int, string) {
		<-release
		return http.StatusOK, ""
	})
	idle := newFnServer(t, nil)
	target := NewCloudEventsTarget("j", endpoints(busy.URL, idle.URL), nil)

	// Both idle: the first send goes to the first endpoint, and is held there.
	blocked := make(chan error, 1)
	go func() {
		_, err := target.Send(context.Background(), testTask(0))
		blocked <- err
	}()
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if evs, _, _ := busy.received(); len(evs) != 1 {
			return fmt.Errorf("busy replica got %d sends, want the held one", len(evs))
		}
		return nil
	})
	for i := 1; i <= 4; i++ {
		if _, err := target.Send(context.Background(), testTask(i)); err != nil {
			t.Fatal(err)
		}
	}
	if evs, _, _ := busy.received(); len(evs) != 1 {
		t.Errorf("busy replica got %d sends while one was in flight, want only that one", len(evs))
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}

	// Both idle again: sends take turns.
	before, _, _ := busy.received()
	for i := 5; i <= 8; i++ {
		if _, err := target.Send(context.Background(), testTask(i)); err != nil {
			t.Fatal(err)
		}
	}
	after, _, _ := busy.received()
	if n := len(after) - len(before); n != 2 {
		t.Errorf("first replica got %d of 4 sends once idle, want 2 (round robin)", n)
	}
}

// The dispatcher and the CloudEvents target together, against a function
// that fails a task's first attempt with 503 and rejects one with 400.
func TestDispatcherOverCloudEvents(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	job := e.submit(t, testSpec("jce", 2))
	var mu sync.Mutex
	attempts := map[string]int{}
	fn := newFnServer(t, func(task wire.ShardTask) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		attempts[task.ID()]++
		switch {
		case task.Epoch == 0 && task.Shard == 1 && attempts[task.ID()] == 1:
			return http.StatusServiceUnavailable, "replica draining"
		case task.Epoch == 1 && task.Shard == 2:
			return http.StatusBadRequest, "shard is not a tar file"
		}
		return http.StatusOK, ""
	})
	target := NewCloudEventsTarget("j", endpoints(fn.URL), &http.Client{Timeout: 30 * time.Second})
	d, err := NewDispatcher(ctx, e.js, job, target, DispatcherOptions{Replicas: capacity(2)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(t, runAsync(ctx, d)); err != nil {
		t.Fatal(err)
	}
	st := d.Stats()
	if st.Done != 5 || st.Failed != 1 || st.Redeliveries != 1 || st.SendErrors != 2 || st.Samples != 5*7 || st.SampleFailures != 5 {
		t.Errorf("stats %+v: want 5 done, 1 failed, 1 redelivery, 2 send errors, 35 samples, 5 failed samples", st)
	}
	if len(st.FailedShards) != 1 || st.FailedShards[0].Key != job.Shards[2] || !strings.Contains(st.FailedShards[0].Reason, "shard is not a tar file") {
		t.Errorf("failed shards %+v", st.FailedShards)
	}
	if _, _, errs := fn.received(); len(errs) > 0 {
		t.Errorf("function could not read events: %v", errs)
	}
}
