// Package kvpoll follows a key-value entry by reading it again and again
// (direct gets) instead of watching it. A watch creates a push consumer
// on the bucket's stream, and JetStream does not check a push consumer's
// deliver subject against its creator's permissions: a client that may
// create one can have the stream's messages published to any subject of
// the account. The trainer agents, each allowed its own job only
// (internal/natsperm), therefore create no consumer on a bucket; JetStream
// wraps theirs so that Watch polls.
package kvpoll

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultEvery is how often a polled key is read: a dispatch plan or a
// cancelled job reaches an agent within it.
const DefaultEvery = 200 * time.Millisecond

// JetStream wraps js: the key-value buckets it opens watch single keys by
// reading them every every (DefaultEvery when 0).
func JetStream(js jetstream.JetStream, every time.Duration) jetstream.JetStream {
	if every <= 0 {
		every = DefaultEvery
	}
	return pollJS{JetStream: js, every: every}
}

type pollJS struct {
	jetstream.JetStream
	every time.Duration
}

func (p pollJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := p.JetStream.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return pollKV{KeyValue: kv, every: p.every}, nil
}

type pollKV struct {
	jetstream.KeyValue
	every time.Duration
}

// Watch follows key as a watch would: its current entry (if any), a nil
// entry, then each new revision, and a delete entry when it is gone. Only
// a single key without options is polled; anything else is refused, so
// that no caller creates a consumer unawares.
func (p pollKV) Watch(ctx context.Context, key string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if len(opts) > 0 || key == "" || strings.ContainsAny(key, "*>") {
		return nil, errors.New("kvpoll: only a single key without options can be followed")
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{updates: make(chan jetstream.KeyValueEntry, 1), cancel: cancel}
	w.done.Add(1)
	go w.run(ctx, p.KeyValue, key, p.every)
	return w, nil
}

type watcher struct {
	updates chan jetstream.KeyValueEntry
	cancel  context.CancelFunc
	done    sync.WaitGroup
	once    sync.Once
}

func (w *watcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// Stop ends the polling; Updates is closed.
func (w *watcher) Stop() error {
	w.once.Do(func() {
		w.cancel()
		w.done.Wait()
	})
	return nil
}

func (w *watcher) run(ctx context.Context, kv jetstream.KeyValue, key string, every time.Duration) {
	defer w.done.Done()
	defer close(w.updates)
	send := func(e jetstream.KeyValueEntry) bool {
		select {
		case w.updates <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var last uint64 // revision sent last; 0: none, or gone
	first := true
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		e, err := kv.Get(ctx, key)
		switch {
		case err == nil && e.Revision() != last:
			if !send(e) {
				return
			}
			last = e.Revision()
		case errors.Is(err, jetstream.ErrKeyNotFound) && last != 0:
			if !send(deleted{bucket: kv.Bucket(), key: key, after: last}) {
				return
			}
			last = 0
		}
		// As a watch does: nil once the current value was sent. Until
		// the first read succeeds (or finds nothing) there is none.
		if first && (err == nil || errors.Is(err, jetstream.ErrKeyNotFound)) {
			first = false
			if !send(nil) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deleted is the entry a watch gives for a key deleted or purged: a read
// cannot tell the two apart.
type deleted struct {
	bucket, key string
	after       uint64
}

func (d deleted) Bucket() string                  { return d.bucket }
func (d deleted) Key() string                     { return d.key }
func (d deleted) Value() []byte                   { return nil }
func (d deleted) Revision() uint64                { return d.after }
func (d deleted) Created() time.Time              { return time.Time{} }
func (d deleted) Delta() uint64                   { return 0 }
func (d deleted) Operation() jetstream.KeyValueOp { return jetstream.KeyValueDelete }
