package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluice-project/sluice/wire"
)

// Target is how a task reaches a function: Send returns once the function
// replied that the shard's output is durably published.
type Target interface {
	Send(ctx context.Context, task wire.ShardTask) (wire.ShardResult, error)
}

// ErrNoReplica means there is no function replica to send a task to now.
var ErrNoReplica = errors.New("no function replica")

// PermanentError is a failure that retrying the task will not fix: the
// function rejected the task itself (bad request, unknown pipeline, shard
// missing, too large).
type PermanentError struct {
	Task     string
	Endpoint string
	// StatusCode is the HTTP status of the reply, 0 when there was none.
	StatusCode int
	// Body is the start of the reply body, which says why.
	Body string
	// Err is the cause when it is not an HTTP reply.
	Err error
}

func (e *PermanentError) Error() string {
	if e.StatusCode == 0 {
		return fmt.Sprintf("task %s: %v", e.Task, e.Err)
	}
	return fmt.Sprintf("task %s: %s replied %d %s: %s", e.Task, e.Endpoint, e.StatusCode,
		http.StatusText(e.StatusCode), e.Body)
}

func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err says the task cannot succeed by retrying.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// permanentStatus lists the replies that reject the task itself. Anything
// else that is not 2xx (429, 503 from a replica going away, other 5xx) may
// pass on another attempt or another replica.
func permanentStatus(code int) bool {
	switch code {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return true
	}
	return false
}

// maxErrorBody caps how much of an error reply is kept for the message.
const maxErrorBody = 4 << 10

// Replicas gives the base URLs of a job's function replicas that serve
// now; the local actuator is one.
type Replicas interface {
	Endpoints(job string) []string
}

// StaticEndpoints is a fixed replica pool, the same for every job (a
// Knative Service URL, or a test's function server).
type StaticEndpoints []string

// Endpoints returns the pool.
func (s StaticEndpoints) Endpoints(string) []string { return s }

type cloudEventsTarget struct {
	job      string
	replicas Replicas
	hc       *http.Client

	mu       sync.Mutex
	inflight map[string]int // per endpoint
	next     int            // rotates the tie-break among equally loaded endpoints

	// With locality, pickHome replaces pick (locality.go).
	locality *Locality
	freed    chan struct{} // closed and replaced when a send finishes
}

// NewCloudEventsTarget sends each task of job as a binary-mode CloudEvent
// POSTed to the endpoint of replicas.Endpoints(job) with the fewest sends
// in flight (ties rotate), and decodes the function's reply event. hc
// carries the timeouts; nil uses a client without one, since a shard may
// take long.
func NewCloudEventsTarget(job string, replicas Replicas, hc *http.Client) Target {
	if hc == nil {
		hc = &http.Client{}
	}
	return &cloudEventsTarget{job: job, replicas: replicas, hc: hc, inflight: map[string]int{}}
}

// pick chooses an endpoint and counts a send on it until release.
func (t *cloudEventsTarget) pick() (endpoint string, release func(), err error) {
	eps := t.replicas.Endpoints(t.job)
	if len(eps) == 0 {
		return "", nil, ErrNoReplica
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	start := t.next % len(eps)
	t.next++
	best := math.MaxInt
	for i := range eps {
		ep := eps[(start+i)%len(eps)]
		if n := t.inflight[ep]; n < best {
			endpoint, best = ep, n
		}
	}
	t.inflight[endpoint]++
	return endpoint, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.inflight[endpoint]--; t.inflight[endpoint] <= 0 {
			delete(t.inflight, endpoint)
		}
	}, nil
}

func (t *cloudEventsTarget) Send(ctx context.Context, task wire.ShardTask) (wire.ShardResult, error) {
	ev := event.New()
	ev.SetID(task.ID())
	ev.SetType(wire.EventTypeShardTask)
	ev.SetSource(wire.EventSource)
	ev.SetSubject(task.Key)
	ev.SetTime(time.Now())
	if err := ev.SetData(event.ApplicationJSON, task); err != nil {
		return wire.ShardResult{}, &PermanentError{Task: task.ID(), Err: fmt.Errorf("encoding event: %w", err)}
	}
	pick := t.pick
	if t.locality != nil {
		pick = func() (string, func(), error) { return t.pickHome(ctx, task) }
	}
	endpoint, release, err := pick()
	if err != nil {
		return wire.ShardResult{}, fmt.Errorf("task %s: %w", task.ID(), err)
	}
	defer release()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return wire.ShardResult{}, fmt.Errorf("task %s: endpoint %q: %w", task.ID(), endpoint, err)
	}
	if err := cehttp.WriteRequest(binding.WithForceBinary(ctx), binding.ToMessage(&ev), req); err != nil {
		return wire.ShardResult{}, &PermanentError{Task: task.ID(), Err: fmt.Errorf("writing event: %w", err)}
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return wire.ShardResult{}, fmt.Errorf("task %s: posting to %s: %w", task.ID(), endpoint, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		body := strings.TrimSpace(string(b))
		if permanentStatus(resp.StatusCode) {
			return wire.ShardResult{}, &PermanentError{Task: task.ID(), Endpoint: endpoint, StatusCode: resp.StatusCode, Body: body}
		}
		return wire.ShardResult{}, fmt.Errorf("task %s: %s replied %d %s: %s", task.ID(), endpoint,
			resp.StatusCode, http.StatusText(resp.StatusCode), body)
	}
	// A 2xx without a readable result is retried: the output is published,
	// so reprocessing only costs time, and the duplicates are dropped.
	reply, err := binding.ToEvent(ctx, cehttp.NewMessageFromHttpResponse(resp))
	if err != nil {
		return wire.ShardResult{}, fmt.Errorf("task %s: reply from %s: %d without a cloudevent: %w", task.ID(), endpoint, resp.StatusCode, err)
	}
	if reply.Type() != wire.EventTypeShardResult {
		return wire.ShardResult{}, fmt.Errorf("task %s: reply from %s: event type %q, want %q", task.ID(), endpoint, reply.Type(), wire.EventTypeShardResult)
	}
	var res wire.ShardResult
	if err := reply.DataAs(&res); err != nil {
		return wire.ShardResult{}, fmt.Errorf("task %s: decoding result from %s: %w", task.ID(), endpoint, err)
	}
	return res, nil
}
