package dispatch

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/wire"
)

// tokenFn is a fake replica behind fn serve's token check.
func tokenFn(t *testing.T, tok bearer.Token) *fakeFn {
	t.Helper()
	f := &fakeFn{calls: map[string]int{}}
	f.Server = httptest.NewServer(bearer.Require(tok, bearer.Function, http.HandlerFunc(f.serve), nil))
	t.Cleanup(f.Close)
	return f
}

// TestFunctionToken: a Dispatcher given the function token sends it with
// every task and gets the shards of a replica that requires it; one
// without is refused, each send counted, and the task fails naming the
// token's source. Sender does the same for one send.
func TestFunctionToken(t *testing.T) {
	tok, err := bearer.Parse("fn-token-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	fn := tokenFn(t, tok)
	e := newEnv(t)

	job := testJob("tok", 3, 1)
	e.queue(t, job)
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 2, InFlight: 2})
	sink := newRecSink(t)
	e.start(t, job, sink, Options{Token: tok})
	tasks := allTasks(job)
	sink.waitEnds(t, len(tasks))
	sink.checkShards(t, tasks)

	job = testJob("notok", 1, 1)
	task := job.Task(0, 0)
	e.queue(t, job)
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 1, InFlight: 1})
	sink = newRecSink(t)
	d, _ := e.start(t, job, sink, Options{MaxDeliver: 2})
	checkFor(t, func() error {
		if len(sink.failures(task)) == 0 {
			return errors.New("the task did not fail")
		}
		return nil
	})
	if f := sink.failures(task); !strings.Contains(f[0], "gave up after 2 failed sends") || !strings.Contains(f[0], "401 Unauthorized") ||
		!strings.Contains(f[0], "SLUICE_FN_TOKEN") {
		t.Errorf("failure %q, want 2 sends refused 401, naming SLUICE_FN_TOKEN", f[0])
	}
	if n := fn.callsOf(task); n != 0 {
		t.Errorf("a refused task reached the replica %d times", n)
	}
	if st := d.Stats(); st.Sends != 2 || st.Failed != 1 {
		t.Errorf("stats %+v, want 2 sends and the task failed", st)
	}

	ctx := context.Background()
	task = testJob("one", 1, 1).Task(0, 0)
	if end, err := (Sender{Token: tok}).Send(ctx, fn.URL, task, nil); err != nil || end.Chunks != chunksOf(task) {
		t.Errorf("Sender with the token: %+v, %v", end, err)
	}
	if _, err := (Sender{}).Send(ctx, fn.URL, task, nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Send without the token: %v, want 401", err)
	}
}
