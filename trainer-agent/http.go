package traineragent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"

	"github.com/sluice-project/sluice/internal/safetensors"
	"github.com/sluice-project/sluice/wire"
)

// Safetensors metadata keys of a batch served over HTTP.
const (
	MetaBatchEpoch = "epoch"
	MetaBatchKeys  = "keys" // JSON array of sample keys in row order
	MetaBatchJob   = "job"
)

// Encode writes b as a safetensors file with the job, epoch and keys in its metadata.
func (b Batch) Encode(job string) ([]byte, error) {
	meta, err := b.metadata(job)
	if err != nil {
		return nil, err
	}
	return safetensors.Encode(b.Tensors, meta)
}

func (b Batch) metadata(job string) (map[string]string, error) {
	keys, err := json.Marshal(b.Keys)
	if err != nil {
		return nil, fmt.Errorf("encoding batch keys: %w", err)
	}
	return map[string]string{
		MetaBatchJob:   job,
		MetaBatchEpoch: strconv.Itoa(b.Epoch),
		MetaBatchKeys:  string(keys),
	}, nil
}

// DecodeBatch reads a batch written by Batch.Encode; tensors alias data and
// come sorted by name.
func DecodeBatch(data []byte) (Batch, error) {
	f, err := safetensors.Decode(data)
	if err != nil {
		return Batch{}, err
	}
	var b Batch
	if b.Epoch, err = strconv.Atoi(f.Metadata[MetaBatchEpoch]); err != nil {
		return Batch{}, fmt.Errorf("batch metadata %q: %w", MetaBatchEpoch, err)
	}
	if err := json.Unmarshal([]byte(f.Metadata[MetaBatchKeys]), &b.Keys); err != nil {
		return Batch{}, fmt.Errorf("batch metadata %q: %w", MetaBatchKeys, err)
	}
	names := make([]string, 0, len(f.Tensors))
	for name := range f.Tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b.Tensors = append(b.Tensors, f.Tensors[name])
	}
	return b, nil
}

// Handler serves the agent to a trainer in another process:
//
//	GET /v1/batch  200: the next batch as a safetensors file (metadata: job,
//	               epoch, keys); blocks until one is ready; 410 Gone once
//	               every batch was handed out, or when the job was
//	               cancelled, failed or deleted (the body says which and
//	               why); 503 if the agent stopped otherwise.
//	GET /v1/stats  200: Stats as JSON (durations in seconds).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/batch", a.serveBatch)
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(a.Stats()); err != nil {
			a.log.Debug("writing stats", "error", err)
		}
	})
	return mux
}

func (a *Agent) serveBatch(w http.ResponseWriter, r *http.Request) {
	b, err := a.Next(r.Context())
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		http.Error(w, fmt.Sprintf("job %s: every batch was delivered", a.job.Spec.ID), http.StatusGone)
		return
	case errors.Is(err, ErrJobEnded):
		http.Error(w, err.Error(), http.StatusGone)
		return
	case r.Context().Err() != nil:
		return // the trainer went away
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	// The file as Encode writes it, without copying the tensors into one
	// buffer first: a batch is MBs.
	meta, err := b.metadata(a.job.Spec.ID)
	var head []byte
	var size int
	if err == nil {
		head, size, err = safetensors.Header(b.Tensors, meta)
	}
	if err != nil {
		// The batch is lost to this trainer; say so rather than hide it.
		for _, k := range b.Keys {
			a.Fail(k, "encoding batch: "+err.Error())
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(size))
	w.Header().Set(wire.HeaderEpoch, strconv.Itoa(b.Epoch))
	// The position already counts this batch as delivered: a trainer
	// that loses it here does not get it from a restarted agent either.
	_, err = w.Write(head)
	for _, t := range b.Tensors {
		if err != nil {
			break
		}
		_, err = w.Write(t.Data)
	}
	if err != nil {
		// The batch left the agent but not for the trainer: report its samples.
		a.log.Warn("writing a batch to the trainer", "epoch", b.Epoch, "samples", len(b.Keys), "error", err)
		for _, k := range b.Keys {
			a.Fail(k, "sending batch to the trainer: "+err.Error())
		}
	}
}
