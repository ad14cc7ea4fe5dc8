package traineragent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sluice-project/sluice/traineragent/internal/demand"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// Handler serves the agent to a trainer's ranks in other processes:
//
//	GET /v1/batch?rank=R&world_size=W&drop_last=0|1&steps=N&wait_s=X&compute_s=Y
//	               200: rank R's part of the next global step as a
//	               safetensors file (metadata: job, reader, epoch, step, keys,
//	               rank, world_size, last_step, position, and on an epoch's
//	               last step epoch_failed; headers Sluice-Epoch,
//	               Sluice-Step); blocks until one is ready. rank defaults
//	               to 0, world_size to the agent's (1 if not fixed yet);
//	               the first request fixes what is not. steps, wait_s and
//	               compute_s are the client's totals (StepReport).
//	               400: a malformed parameter. 409: the world size, rank or
//	               drop_last do not fit the agent's ranks. 410 (header
//	               Sluice-End): "delivered" once the rank got every step,
//	               "ended" when the job was cancelled, failed or deleted
//	               (the body says why). 503: the agent stopped otherwise.
//	POST /v1/resume?rank=R&world_size=W&generation=G
//	               body: a State; rank R of a generation of W ranks
//	               (G: the trainer's run, optional) resumes from it
//	               (Resume): the generation's first resume rewinds the
//	               reader, its other ranks' join it.
//	               200: ResumeResult as JSON. 400: no rank, a malformed
//	               state, or another job's or reader's. 409: the
//	               generation's other ranks resumed from another state.
//	               503: the agent stopped.
//	GET /v1/stats  200: Stats as JSON (durations in seconds).
func (a *Reader) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+wire.AgentPathBatch, a.serveBatch)
	mux.HandleFunc("POST "+wire.AgentPathResume, a.serveResume)
	mux.HandleFunc("GET "+wire.AgentPathStats, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(a.Stats()); err != nil {
			a.log.Debug("writing stats", "err", err)
		}
	})
	return mux
}

// parseBatchQuery reads GET /v1/batch's parameters; report is nil when
// the client sent none.
func parseBatchQuery(q url.Values) (req readerstate.RankRequest, report *demand.StepReport, err error) {
	intParam := func(name string, lo, hi int) (int, bool, error) {
		v := q.Get(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return 0, false, fmt.Errorf("%s=%q: want an integer in %d..%d", name, v, lo, hi)
		}
		return n, true, nil
	}
	floatParam := func(name string) (float64, bool, error) {
		v := q.Get(name)
		if v == "" {
			return 0, false, nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, false, fmt.Errorf("%s=%q: want a number >= 0", name, v)
		}
		return f, true, nil
	}
	var errs []error
	var ok [3]bool
	var e error
	req.Rank, _, e = intParam(wire.AgentParamRank, 0, readerstate.MaxWorldSize-1)
	errs = append(errs, e)
	req.World, _, e = intParam(wire.AgentParamWorldSize, 1, readerstate.MaxWorldSize)
	errs = append(errs, e)
	switch v := q.Get(wire.AgentParamDropLast); v {
	case "":
	case "1", "true":
		req.DropLast = new(bool)
		*req.DropLast = true
	case "0", "false":
		req.DropLast = new(bool)
	default:
		errs = append(errs, fmt.Errorf("drop_last=%q: want 0 or 1", v))
	}
	var r demand.StepReport
	var steps int
	steps, ok[0], e = intParam(wire.AgentParamSteps, 0, math.MaxInt32)
	errs = append(errs, e)
	r.WaitS, ok[1], e = floatParam(wire.AgentParamWaitS)
	errs = append(errs, e)
	r.ComputeS, ok[2], e = floatParam(wire.AgentParamComputeS)
	errs = append(errs, e)
	if err := errors.Join(errs...); err != nil {
		return req, nil, err
	}
	if ok[0] || ok[1] || ok[2] {
		r.Rank, r.Steps = req.Rank, int64(steps)
		report = &r
	}
	return req, report, nil
}

func (a *Reader) serveBatch(w http.ResponseWriter, r *http.Request) {
	req, report, err := parseBatchQuery(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if report != nil {
		a.reportStep(*report)
	}
	p, err := a.nextPart(r.Context(), req)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		w.Header().Set(wire.AgentHeaderEnd, wire.AgentEndDelivered)
		http.Error(w, fmt.Sprintf("job %s: rank %d got every step of every epoch", a.job.Spec.ID, req.Rank), http.StatusGone)
		return
	case errors.Is(err, readerstate.ErrJobEnded):
		w.Header().Set(wire.AgentHeaderEnd, wire.AgentEndEnded)
		http.Error(w, err.Error(), http.StatusGone)
		return
	case errors.Is(err, readerstate.ErrWorldMismatch):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case r.Context().Err() != nil:
		return // the trainer went away
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	b := p.Batch
	// The file as Encode writes it, without copying the tensors into one
	// buffer first: a batch is MBs.
	meta, err := b.Metadata(a.job.Spec.ID)
	var head []byte
	var size int
	if err == nil {
		meta[wire.MetaBatchReader] = a.reader
		meta[wire.MetaBatchStep] = strconv.Itoa(p.Step)
		meta[wire.MetaBatchRank] = strconv.Itoa(req.Rank)
		meta[wire.MetaBatchWorldSize] = strconv.Itoa(p.World)
		meta[wire.MetaBatchLastStep] = strconv.FormatBool(p.Last)
		meta[wire.MetaBatchPosition] = string(p.Position)
		if p.Last {
			meta[wire.MetaBatchEpochFailed] = strconv.FormatInt(p.EpochFailed, 10)
		}
		head, size, err = b.Header(meta)
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
	w.Header().Set(wire.AgentHeaderEpoch, strconv.Itoa(b.Epoch))
	w.Header().Set(wire.AgentHeaderStep, strconv.Itoa(p.Step))
	// The position already counts this batch as delivered: a trainer
	// that loses it here does not get it from a restarted agent either
	// (it resumes from its checkpoint instead).
	if err := b.WriteFile(w, head); err != nil {
		// The batch left the agent but not for the trainer: report its samples.
		a.log.Warn("writing a batch to the trainer", "epoch", b.Epoch, "rank", req.Rank, "samples", len(b.Keys), "err", err)
		for _, k := range b.Keys {
			a.Fail(k, "sending batch to the trainer: "+err.Error())
		}
	}
}

// maxStateBytes bounds a resume's body: a state is under 64 KiB at
// 10,000 shards.
const maxStateBytes = 4 << 20

func (a *Reader) serveResume(w http.ResponseWriter, r *http.Request) {
	world := 0
	if v := r.URL.Query().Get(wire.AgentParamWorldSize); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > readerstate.MaxWorldSize {
			http.Error(w, fmt.Sprintf("world_size=%q: want an integer in 1..%d", v, readerstate.MaxWorldSize), http.StatusBadRequest)
			return
		}
		world = n
	}
	// The rank: each rank of a generation resumes once (a client that sends
	// none is older than the agent's resume per rank).
	v := r.URL.Query().Get(wire.AgentParamRank)
	rank, err := strconv.Atoi(v)
	if err != nil || rank < 0 || rank >= readerstate.MaxWorldSize {
		http.Error(w, fmt.Sprintf("rank=%q: want the resuming rank, an integer in 0..%d (a client that sends none is older than this agent)", v, readerstate.MaxWorldSize-1), http.StatusBadRequest)
		return
	}
	var st State
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxStateBytes)).Decode(&st); err != nil {
		http.Error(w, fmt.Sprintf("decoding the state: %v", err), http.StatusBadRequest)
		return
	}
	res, err := a.Resume(r.Context(), st, world, rank, r.URL.Query().Get(wire.AgentParamGeneration))
	switch {
	case err == nil:
	case errors.Is(err, readerstate.ErrBadState):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case errors.Is(err, readerstate.ErrResumeConflict):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case errors.Is(err, readerstate.ErrJobEnded):
		w.Header().Set(wire.AgentHeaderEnd, wire.AgentEndEnded)
		http.Error(w, err.Error(), http.StatusGone)
		return
	case r.Context().Err() != nil:
		return
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(res); err != nil {
		a.log.Debug("writing the resume result", "err", err)
	}
}
