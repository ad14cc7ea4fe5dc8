package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/traineragent"
)

// trainer stands in for a training script: it reads batches from the
// agent's GET /v1/batch until 410 Gone and "computes" for stepTime each,
// counting what it saw by (epoch, key).
type trainer struct {
	url         string
	token       bearer.Token
	stepTime    time.Duration
	mu          sync.Mutex
	seen        map[string]int // epoch/key -> deliveries
	duplicates  int64
	delivered   atomic.Int64
	waitedNanos atomic.Int64
	waited, ran time.Duration
	first, last time.Time
	epochEnd    map[int]time.Time // each epoch's last batch
}

func (t *trainer) run(ctx context.Context) error {
	began := time.Now()
	defer func() { t.ran = time.Since(began); t.waited = time.Duration(t.waitedNanos.Load()) }()
	for {
		asked := time.Now()
		batch, err := t.next(ctx)
		t.waitedNanos.Add(int64(time.Since(asked)))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("trainer: next batch: %w", err)
		}
		now := time.Now()
		if t.first.IsZero() {
			t.first = now
		}
		t.last = now
		t.mu.Lock()
		t.epochEnd[batch.Epoch] = now
		for _, k := range batch.Keys {
			id := strconv.Itoa(batch.Epoch) + "/" + k
			if t.seen[id]++; t.seen[id] > 1 {
				t.duplicates++
			}
		}
		t.mu.Unlock()
		t.delivered.Add(int64(len(batch.Keys)))
		select { // the simulated GPU step
		case <-time.After(t.stepTime):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// next GETs one batch; io.EOF once the agent says every batch was
// delivered (or the job ended: the summary says how).
func (t *trainer) next(ctx context.Context) (traineragent.Batch, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return traineragent.Batch{}, err
	}
	t.token.Authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return traineragent.Batch{}, err
	}
	defer resp.Body.Close()
	var body []byte
	if resp.ContentLength > 0 && resp.ContentLength < 1<<31 {
		body = make([]byte, resp.ContentLength) // a batch is MBs: read it once
		_, err = io.ReadFull(resp.Body, body)
	} else {
		body, err = io.ReadAll(resp.Body)
	}
	if err != nil {
		return traineragent.Batch{}, fmt.Errorf("reading a batch: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return traineragent.DecodeBatch(body)
	case http.StatusGone:
		return traineragent.Batch{}, io.EOF
	}
	return traineragent.Batch{}, fmt.Errorf("GET %s: %s: %s", t.url, resp.Status, bytes.TrimSpace(body))
}
