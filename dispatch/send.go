package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/wire"
)

// maxErrorBody caps how much of an error reply is read for the message.
const maxErrorBody = 4 << 10

// maxReason caps a failure reason handed to the sink and published.
const maxReason = 1 << 10

// failKind classifies a failed send; it decides whether the task is sent
// again and whether the failure counts against Options.MaxDeliver.
type failKind int

const (
	// failTransient: retried, counted (connection errors, 5xx, a shard
	// incomplete, an error frame that is not permanent).
	failTransient failKind = iota
	// failMalformed: the replica broke the frame protocol; another one
	// may be fine, so retried, counted.
	failMalformed
	// failBusy: 429 or 503, the replica's state, not the task's: retried
	// on another endpoint if there is one, not counted.
	failBusy
	// failUnauthorized: 401 or 403, this agent's function token missing
	// or wrong: retried (a replica may be restarting with a new token),
	// counted, so that a misconfigured agent fails its tasks, each naming
	// the cause, rather than retrying them for ever.
	failUnauthorized
	// failPermanent: the task itself is wrong (400, 404, 413, 415, a
	// permanent error frame): Failed at once.
	failPermanent
)

// outcome is the label of sluice_dispatch_sends_total.
func (k failKind) outcome() string {
	switch k {
	case failMalformed:
		return "malformed"
	case failBusy:
		return "busy"
	case failUnauthorized:
		return "unauthorized"
	case failPermanent:
		return "permanent"
	}
	return "transient"
}

// sendError is a failed send.
type sendError struct {
	kind failKind
	err  error
}

func (e *sendError) Error() string { return e.err.Error() }
func (e *sendError) Unwrap() error { return e.err }

func failed(kind failKind, format string, args ...any) error {
	return &sendError{kind: kind, err: fmt.Errorf(format, args...)}
}

// kindOf is err's failKind; an error that is not a sendError is transient.
func kindOf(err error) failKind {
	var se *sendError
	if errors.As(err, &se) {
		return se.kind
	}
	return failTransient
}

// permanentStatus says a reply rejects the task itself: a function's
// 400, 404, 413 or 415 with wire.HeaderTaskRejected. Without the header
// the status came from something else at the replica's address.
func permanentStatus(resp *http.Response) bool {
	if resp.Header.Get(wire.HeaderTaskRejected) != "true" {
		return false
	}
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return true
	}
	return false
}

// errStalled cancels a send whose replica went silent.
var errStalled = errors.New("replica stalled")

// sendShard POSTs task to endpoint as a binary-mode CloudEvent, with tok
// as its bearer token when set, and reads the shard's frames from the
// reply, handing each chunk to chunk (its data the callee's to keep; an
// error refuses it and fails the send). wait (nil: none) is called before
// each frame is read, and may block while the caller has no room for it:
// the reply is then not read, and the replica waits on its write. It
// returns the shard's end once the end frame came, or an error: ctx's
// when ctx ended, else a sendError. stall > 0 fails the send when no byte
// came for that long, not counting the time in chunk and wait.
func sendShard(ctx context.Context, hc *http.Client, tok bearer.Token, endpoint string, task wire.ShardTask, stall time.Duration, chunk func(index int, data []byte) error, wait func() error) (wire.ShardEnd, error) {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var timer *time.Timer
	if stall > 0 {
		timer = time.AfterFunc(stall, func() { cancel(errStalled) })
		defer timer.Stop()
	}
	// ctx's end is the caller's to report; a stall is the replica's fault.
	cause := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(context.Cause(sctx), errStalled) {
			return failed(failTransient, "%s: no byte for %v: %w", endpoint, stall, errStalled)
		}
		return err
	}

	req, err := taskRequest(sctx, tok, endpoint, task)
	if err != nil {
		return wire.ShardEnd{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return wire.ShardEnd{}, cause(failed(failTransient, "posting to %s: %w", endpoint, err))
	}
	defer resp.Body.Close()
	if err := replyError(resp, tok, endpoint); err != nil {
		return wire.ShardEnd{}, err
	}
	if wait == nil {
		wait = func() error { return nil }
	}
	var body io.Reader = resp.Body
	if timer != nil {
		body = &progressReader{r: resp.Body, timer: timer, stall: stall}
		take, room := chunk, wait
		chunk = func(i int, data []byte) error {
			timer.Stop()
			defer timer.Reset(stall)
			return take(i, data)
		}
		wait = func() error {
			timer.Stop()
			defer timer.Reset(stall)
			return room()
		}
	}
	return readShard(body, endpoint, task, chunk, wait, cause)
}

// taskRequest is the POST of task to endpoint as a binary-mode
// CloudEvent, with tok as its bearer token when set.
func taskRequest(ctx context.Context, tok bearer.Token, endpoint string, task wire.ShardTask) (*http.Request, error) {
	ev := event.New()
	ev.SetID(task.ID())
	ev.SetType(wire.EventTypeShardTask)
	ev.SetSource(wire.EventSource)
	ev.SetSubject(task.Key)
	ev.SetTime(time.Now())
	if err := ev.SetData(event.ApplicationJSON, task); err != nil {
		return nil, failed(failPermanent, "encoding task event: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return nil, failed(failTransient, "endpoint %q: %w", endpoint, err)
	}
	if err := cehttp.WriteRequest(binding.WithForceBinary(ctx), binding.ToMessage(&ev), req); err != nil {
		return nil, failed(failPermanent, "writing task event: %w", err)
	}
	// On the request, not in a transport: net/http drops it on a redirect
	// to another host.
	tok.Authorize(req)
	return req, nil
}

// replyError is the sendError of a reply that is not a shard stream,
// classified by its status; nil for a 200 shard stream.
func replyError(resp *http.Response, tok bearer.Token, endpoint string) error {
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		body := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
		kind := failTransient
		switch {
		case permanentStatus(resp):
			kind = failPermanent
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
			kind = failBusy
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			kind = failUnauthorized
			sent := "sent none"
			if tok.IsSet() {
				sent = "sent one"
			}
			body += fmt.Sprintf(" (this agent %s: it sends the token of %s)", sent, bearer.Function)
		}
		return failed(kind, "%s replied %d %s: %s", endpoint, resp.StatusCode, http.StatusText(resp.StatusCode), body)
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != wire.ShardStreamMediaType {
		return failed(failMalformed, "%s replied 200 with Content-Type %q, want %s (a function of another version?): %w",
			endpoint, ct, wire.ShardStreamMediaType, wire.ErrFrame)
	}
	return nil
}

// readShard reads task's frames from body, handing each chunk to chunk
// and calling wait before each, until the shard's end (returned) or an
// error frame; cause turns a read error into the send's.
func readShard(body io.Reader, endpoint string, task wire.ShardTask, chunk func(int, []byte) error, wait func() error, cause func(error) error) (wire.ShardEnd, error) {
	fr := wire.NewFrameReader(body, task.ChunkMaxBytes)
	chunks := 0
	for {
		if err := wait(); err != nil {
			return wire.ShardEnd{}, cause(failed(failTransient, "%s after %d chunks: waiting for room: %w", endpoint, chunks, err))
		}
		f, err := fr.Next()
		switch {
		case errors.Is(err, wire.ErrFrame):
			return wire.ShardEnd{}, failed(failMalformed, "%s after %d chunks: %w", endpoint, chunks, err)
		case errors.Is(err, io.EOF):
			return wire.ShardEnd{}, failed(failTransient, "shard incomplete: the reply from %s ended after %d chunks without a shard end", endpoint, chunks)
		case err != nil:
			return wire.ShardEnd{}, cause(failed(failTransient, "shard incomplete: reading the reply from %s after %d chunks: %w", endpoint, chunks, err))
		}
		switch f.Kind {
		case wire.FrameChunk:
			if f.Chunk != chunks {
				return wire.ShardEnd{}, failed(failMalformed, "%s sent chunk %d, want chunk %d: %w", endpoint, f.Chunk, chunks, wire.ErrFrame)
			}
			if err := chunk(f.Chunk, f.Data); err != nil {
				return wire.ShardEnd{}, cause(failed(failMalformed, "%s: chunk %d refused: %w", endpoint, f.Chunk, err))
			}
			chunks++
		case wire.FrameEnd:
			return shardEnd(f.Data, endpoint, task, chunks)
		case wire.FrameError:
			return wire.ShardEnd{}, shardError(f.Data, endpoint, chunks)
		}
	}
}

// shardEnd decodes an end frame and checks it against task and the
// chunks that came.
func shardEnd(data []byte, endpoint string, task wire.ShardTask, chunks int) (wire.ShardEnd, error) {
	var end wire.ShardEnd
	if err := json.Unmarshal(data, &end); err != nil {
		return wire.ShardEnd{}, failed(failMalformed, "%s: decoding the shard end: %v: %w", endpoint, err, wire.ErrFrame)
	}
	if end.Job != task.Job || end.Epoch != task.Epoch || end.Shard != task.Shard {
		return wire.ShardEnd{}, failed(failMalformed, "%s: shard end of job %q epoch %d shard %d, want %s: %w",
			endpoint, end.Job, end.Epoch, end.Shard, task.ID(), wire.ErrFrame)
	}
	if end.Chunks != chunks {
		return wire.ShardEnd{}, failed(failMalformed, "%s: shard end says %d chunks after %d: %w", endpoint, end.Chunks, chunks, wire.ErrFrame)
	}
	return end, nil
}

// shardError is the sendError of an error frame.
func shardError(data []byte, endpoint string, chunks int) error {
	var se wire.ShardError
	if err := json.Unmarshal(data, &se); err != nil {
		return failed(failMalformed, "%s: decoding an error frame: %v: %w", endpoint, err, wire.ErrFrame)
	}
	kind := failTransient
	if se.Permanent {
		kind = failPermanent
	}
	return failed(kind, "%s: shard failed after %d chunks: %s", endpoint, chunks, strings.ToValidUTF8(se.Message, "?"))
}

// progressReader pushes a send's stall deadline back on every byte read.
type progressReader struct {
	r     io.Reader
	timer *time.Timer
	stall time.Duration
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.timer.Reset(p.stall)
	}
	return n, err
}

// truncate caps a reason at n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// Sender sends tasks to one replica at a time, as a Dispatcher does,
// without the retries, the choice of replica and the acks: for tools and
// tests that talk to one replica.
type Sender struct {
	Client *http.Client // nil: http.DefaultClient (the dispatcher's is NewHTTPClient)
	Token  bearer.Token // the function token (bearer.Function), sent when set
}

// Send posts task to endpoint once (a binary-mode CloudEvent) and reads
// the shard's frames from the reply, handing each chunk to chunk (nil:
// dropped): the shard's end, or why not.
func (s Sender) Send(ctx context.Context, endpoint string, task wire.ShardTask, chunk func(index int, data []byte)) (wire.ShardEnd, error) {
	hc := s.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	take := func(int, []byte) error { return nil }
	if chunk != nil {
		take = func(i int, data []byte) error {
			chunk(i, data)
			return nil
		}
	}
	return sendShard(ctx, hc, s.Token, endpoint, task, 0, take, nil)
}
