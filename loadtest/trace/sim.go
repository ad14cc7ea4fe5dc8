package trace

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/autoscale/baseline"
	"github.com/sluice-project/sluice/wire"
)

// Policy is how preprocessing CPUs are given to tasks.
type Policy string

const (
	// Static: each task preprocesses on the cores it asked for, less its
	// trainer's own.
	Static Policy = "static"
	// Sluice: replicas from a pool of the running tasks' data loader cores
	// and Lendable of the unrequested ones, sized per task by
	// autoscale.Decide and shared by the allocator (marginal or fair),
	// ticked every second on virtual time.
	Sluice     Policy = "sluice"
	SluiceFair Policy = "sluice-fair"
	// KPA and KEDA: the same pool's replicas sized per task, alone, by
	// the baselines platform teams run (package autoscale/baseline):
	// Knative's own KPA decider fed the requests a push dispatcher keeps
	// outstanding (the task's shard tasks left, at most its max replicas),
	// and KEDA's queue-lag scaler with its HPA (lag: the shard tasks
	// left). The pool's capacity still bounds what is granted.
	KPA  Policy = "kpa"
	KEDA Policy = "keda"
)

// JobResult is one task's outcome under a policy.
type JobResult struct {
	Name string
	// JCT is from its arrival (its start in the trace's schedule) to its
	// last sample trained (s); Stall
	// the part of it its trainer waited for data.
	JCT, Stall float64
	// Wait is the part of JCT spent queued for GPUs (Model.QueueGPUs).
	Wait float64
	// Readers are the trainers fed (Task.Readers, at least 1); Stall sums
	// their waits.
	Readers int
	// GPUs held, and the core-seconds reserved for its preprocessing:
	// its replicas, starting ones included, x ReplicaCores x time (static:
	// its data loader cores x time).
	GPUs, CoreSeconds float64
	// FirstBatch is from its start (its GPUs given) to its first sample
	// trained (s): a cold start counts.
	FirstBatch float64
	Censored   bool
}

// Sample is the cluster at one time of a run (Model.SampleEvery).
type Sample struct {
	T float64 // s
	// Replicas are serving or starting (pooled policies); ReservedCores
	// the preprocessing cores reserved (replicas' cores, or the running
	// tasks' data loader cores under Static); Stalled the trainers
	// waiting for data (fractions count: half a trainer's time is 0.5).
	Replicas               int
	ReservedCores, Stalled float64
}

// Result is a policy's run over a trace.
type Result struct {
	Policy Policy
	Jobs   []JobResult
	// Ticks are the control rounds run (Sluice policies); Decides the
	// autoscale.Decide calls.
	Ticks, Decides int
	// Timeline samples the cluster every Model.SampleEvery (none if 0).
	Timeline []Sample
	// Wall is how long the simulation took.
	Wall time.Duration
}

// Summary is what the README reports of a Result, over the tasks that
// finished within the trace.
type Summary struct {
	Jobs int `json:"jobs"`
	// MeanJCT is the average completion time (s); GPUUtil the share of
	// GPU-seconds held that trained (1 - stall share, GPU-weighted);
	// StallS the trainers' total wait (s); CoreHours the cores reserved
	// for preprocessing (JobResult.CoreSeconds).
	MeanJCT   float64 `json:"mean_jct_s"`
	GPUUtil   float64 `json:"gpu_util"`
	StallS    float64 `json:"stall_s"`
	CoreHours float64 `json:"core_hours"`
}

// Summarize averages r over its uncensored tasks.
func (r Result) Summarize() Summary {
	var s Summary
	held, busy := 0.0, 0.0
	for _, j := range r.Jobs {
		if j.Censored {
			continue
		}
		s.Jobs++
		s.MeanJCT += j.JCT
		s.StallS += j.Stall
		s.CoreHours += j.CoreSeconds / 3600
		// Stall sums the readers' waits, each reader holding its share
		// of GPUs.
		h := j.GPUs * (j.JCT - j.Wait)
		held += h
		busy += h - j.GPUs/float64(max(j.Readers, 1))*j.Stall
	}
	if s.Jobs > 0 {
		s.MeanJCT /= float64(s.Jobs)
	}
	if held > 0 {
		s.GPUUtil = busy / held
	}
	return s
}

// Prepare draws each task's demand and its work: a trace task trains, at
// its static rate, through the samples of its recorded duration (the trace
// ran with the static allocation).
func Prepare(tr Trace, m Model) []Task {
	out := make([]Task, 0, len(tr.Tasks))
	for _, t := range tr.Tasks {
		t = m.draw(t)
		if t.Samples == 0 {
			t.Samples = t.Duration * staticRate(t)
		}
		if !(t.Samples > 0) {
			continue // no data loader cores: nothing static could train
		}
		out = append(out, t)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	if m.QueueGPUs > 0 {
		sort.SliceStable(out, func(i, j int) bool { return out[i].Arrival < out[j].Arrival })
	}
	return out
}

// Simulate runs tasks (from Prepare) on the cluster under policy; ctx
// stops it early with ctx's error.
func Simulate(ctx context.Context, tr Trace, tasks []Task, m Model, policy Policy) (Result, error) {
	if err := m.Validate(); err != nil {
		return Result{}, fmt.Errorf("model: %w", err)
	}
	start := time.Now()
	var res Result
	var err error
	switch policy {
	case Static:
		if m.QueueGPUs == 0 {
			res = simulateStatic(tasks)
			break
		}
		fallthrough
	case Sluice, SluiceFair, KPA, KEDA:
		s, err := newSim(tr.Cluster, tasks, m, policy)
		if err != nil {
			return Result{}, err
		}
		err = s.run(ctx)
		res = s.result()
		if err != nil {
			res.Policy, res.Wall = policy, time.Since(start)
			return res, err
		}
	default:
		return Result{}, fmt.Errorf("policy %q: want static, sluice, sluice-fair, kpa or keda", policy)
	}
	res.Policy, res.Wall = policy, time.Since(start)
	return res, err
}

// simulateStatic needs no clock: each task's rate is constant.
func simulateStatic(tasks []Task) Result {
	var r Result
	for _, t := range tasks {
		rate := staticRate(t)
		jct := t.Samples / rate
		readers := float64(max(t.Readers, 1))
		r.Jobs = append(r.Jobs, JobResult{Name: t.Name, JCT: jct, Stall: readers * (jct - t.Samples/t.TrainerRate),
			GPUs: readers * t.GPUs, CoreSeconds: (t.Cores - t.HostCores) * jct, Censored: t.Censored, Readers: int(readers)})
	}
	sort.SliceStable(r.Jobs, func(a, b int) bool { return r.Jobs[a].Name < r.Jobs[b].Name })
	return r
}

// tick is the controller's control period.
const tick = 1.0

// job is a task while it runs under a Sluice policy.
type job struct {
	t   *Task
	cfg autoscale.Config
	st  autoscale.State
	// made and eaten are the samples preprocessed and trained; the
	// difference waits in the job's output buffer.
	made, eaten float64
	perRep      float64 // samples/s of one replica
	starts      []float64
	ready       int // replicas serving
	granted     int // replicas asked of the actuator
	bid         autoscale.Bid
	zeroSince   time.Time // since when granted none while wanting some (autoscale.RoundJob.ZeroSince)
	// settled: the last two rounds decided the same with the same inputs,
	// and the scale-down window holds nothing else, so Decide would repeat
	// itself until its ready count or its grant changes.
	settled, same int
	lastKey       [7]float64
	phase         int  // bufferPhase, to notice it change
	fed           bool // its trainer got its first sample
	res           JobResult
}

// eps is the samples under which a job's remainders count as none.
func (j *job) eps() float64 { return 1e-9 * j.t.Samples }

// buffered is what waits in the job's output buffer.
func (j *job) buffered() float64 { return max(j.made-j.eaten, 0) }

// bufferPhase is the state of a job's buffer that Decide reads: 0 empty,
// 1 below the policy's full mark, 2 above it, 3 production done.
func (j *job) bufferPhase() int {
	switch b := j.buffered(); {
	case j.t.Samples-j.made <= j.eps():
		return 3
	case b >= fullMark*j.t.BufferSamples:
		return 2
	case b > j.eps():
		return 1
	}
	return 0
}

// fullMark is the buffer fill above which autoscale.Decide counts a job
// as over-supplied.
const fullMark = 0.75

type sim struct {
	queue                []*job  // arrived, waiting for GPUs (Model.QueueGPUs)
	freeGPUs             float64 // of Model.QueueGPUs
	cl                   Cluster
	m                    Model
	policy               Policy
	tasks                []Task
	next                 int    // next task to start
	jobs                 []*job // running
	done                 []JobResult
	other                []Task // CPU-only tasks, by start
	nextO                int
	usedCores, dataCores float64 // requested by running tasks; their data loader share
	hostCores            float64 // running tasks' trainers' own
	now                  float64
	// share is the part of a core each replica's core gets when a job
	// list's Cluster.MaxReplicas lets more replicas run than it has cores.
	share          float64
	nextTick       float64
	ticks, decides int
	nextSample     float64
	timeline       []Sample
	pol            autoscale.Policy // sizes the jobs each round (Sluice policies)
}

func newSim(cl Cluster, tasks []Task, m Model, policy Policy) (*sim, error) {
	other := append([]Task(nil), cl.Other...)
	sort.SliceStable(other, func(i, j int) bool { return other[i].Start < other[j].Start })
	if m.QueueGPUs > 0 {
		cl.Cores *= float64(m.QueueGPUs) / cl.GPUs
		cl.GPUs, other = float64(m.QueueGPUs), nil
	}
	s := &sim{cl: cl, m: m, policy: policy, tasks: tasks, other: other, nextTick: math.Inf(1), freeGPUs: cl.GPUs, share: 1}
	var err error
	switch policy {
	case SluiceFair:
		s.pol = autoscale.SluicePolicy{Allocator: autoscale.AllocatorFair}
	case KPA:
		s.pol, err = baseline.NewKPA(baseline.DefaultKPAConfig(1), tasksInFlight)
	case KEDA:
		cfg := baseline.DefaultKEDAConfig()
		cfg.Phase = simTime(0)
		s.pol, err = baseline.NewKEDA(cfg, baseline.BacklogLag)
	default:
		s.pol = autoscale.SluicePolicy{Allocator: autoscale.AllocatorMarginal}
	}
	return s, err
}

// tasksInFlight is the KPA's concurrency of a task: the requests a push
// dispatcher keeps outstanding, one per shard task left, at most one per
// replica it may have (containerConcurrency 1).
func tasksInFlight(j autoscale.RoundJob) float64 {
	return float64(min(j.Inputs.Pending+j.Inputs.InFlight, j.Config.MaxReplicas))
}

// baselinePolicy is whether the policy is a baseline's: it decides every
// round (no settled jobs) and is not bounded by the pool it does not know
// of, beyond what the pool grants.
func (s *sim) baselinePolicy() bool { return s.policy == KPA || s.policy == KEDA }

func (s *sim) config(t *Task) autoscale.Config {
	cfg := autoscale.DefaultConfig()
	cfg.MaxReplicas, cfg.ClusterCapacity = 10000, 100000
	if s.policy == SluiceFair {
		cfg.Allocator = autoscale.AllocatorFair
	}
	return cfg.ForJob(0, t.MaxReplicas)
}

// otherEnds holds the CPU-only tasks' (end, cores), a min-heap would do;
// there are few, so a sorted slice is kept.
type otherEnd struct{ end, cores float64 }

func (s *sim) run(ctx context.Context) error {
	var ends []otherEnd
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.shareCores()
		t := s.nextEvent(ends)
		if math.IsInf(t, 1) {
			return nil
		}
		// At least a microsecond: late in a long trace an event a
		// fraction of a nanosecond away would not move the clock at all.
		s.advance(max(t, s.now+1e-6))
		// Ends first: a task done frees its cores for the round.
		changed := s.finishJobs()
		changed = s.runOthers(&ends) || changed
		changed = s.admit() || changed
		changed = s.readyReplicas() || changed
		if s.policy == Static {
			continue // no control rounds
		}
		if s.now >= s.nextTick {
			s.round()
		} else if changed && math.IsInf(s.nextTick, 1) {
			// The controller ticks every second; rounds in which no job
			// could decide otherwise are skipped.
			s.nextTick = math.Floor(s.now/tick)*tick + tick
		}
	}
}

// nextEvent is when the next thing happens: a task or CPU-only task
// starting, a CPU-only task ending, a replica ready, a job's rates
// changing, a control tick (+Inf: nothing will).
func (s *sim) nextEvent(ends []otherEnd) float64 {
	t := math.Inf(1)
	if s.next < len(s.tasks) {
		t = s.arrival(&s.tasks[s.next])
	}
	if s.nextO < len(s.other) {
		t = min(t, s.other[s.nextO].Start)
	}
	if len(ends) > 0 {
		t = min(t, ends[0].end)
	}
	for _, j := range s.jobs {
		if len(j.starts) > 0 {
			t = min(t, j.starts[0])
		}
		t = min(t, s.now+s.untilChange(j))
	}
	return min(t, s.nextTick)
}

// finishJobs notes the jobs whose buffer phase changed and ends those
// that trained all their samples, freeing their GPUs and cores.
func (s *sim) finishJobs() (changed bool) {
	kept := s.jobs[:0]
	for _, j := range s.jobs {
		if p := j.bufferPhase(); p != j.phase {
			j.phase, j.settled, changed = p, 0, true
		}
		if j.t.Samples-j.eaten <= j.eps() {
			j.res.JCT = s.now - s.arrival(j.t)
			s.done = append(s.done, j.res)
			s.freeGPUs += j.res.GPUs
			s.usedCores -= j.t.Cores
			s.dataCores -= j.t.Cores - j.t.HostCores
			s.hostCores -= j.t.HostCores
			changed = true
			continue
		}
		kept = append(kept, j)
	}
	s.jobs = kept
	return changed
}

// runOthers ends and starts the CPU-only tasks due now; ends is kept
// sorted by end.
func (s *sim) runOthers(ends *[]otherEnd) (changed bool) {
	for len(*ends) > 0 && (*ends)[0].end <= s.now {
		s.usedCores -= (*ends)[0].cores
		*ends = (*ends)[1:]
		changed = true
	}
	for s.nextO < len(s.other) && s.other[s.nextO].Start <= s.now {
		o := s.other[s.nextO]
		s.nextO++
		s.usedCores += o.Cores
		e := otherEnd{o.Start + o.Duration, o.Cores}
		i := sort.Search(len(*ends), func(i int) bool { return (*ends)[i].end > e.end })
		*ends = append(*ends, otherEnd{})
		copy((*ends)[i+1:], (*ends)[i:])
		(*ends)[i] = e
		changed = true
	}
	return changed
}

// admit queues the tasks arrived by now and starts the queue's head while
// its GPUs are free, first come, first served (a task wanting more than
// the cluster has runs once it is empty).
func (s *sim) admit() (changed bool) {
	for s.next < len(s.tasks) && s.arrival(&s.tasks[s.next]) <= s.now {
		t := &s.tasks[s.next]
		s.next++
		s.queue = append(s.queue, &job{t: t, cfg: s.config(t), perRep: s.m.ReplicaCores / t.CPUPerSample,
			res: JobResult{Name: t.Name, GPUs: float64(t.Readers) * t.GPUs, Censored: t.Censored, Readers: max(t.Readers, 1)}})
	}
	for len(s.queue) > 0 {
		j := s.queue[0]
		if s.m.QueueGPUs > 0 && j.res.GPUs > s.freeGPUs+1e-9 && (len(s.jobs) > 0 || s.freeGPUs < s.cl.GPUs) {
			break
		}
		s.queue = s.queue[1:]
		s.freeGPUs -= j.res.GPUs
		j.res.Wait = s.now - s.arrival(j.t)
		s.jobs = append(s.jobs, j)
		s.usedCores += j.t.Cores
		s.dataCores += j.t.Cores - j.t.HostCores
		s.hostCores += j.t.HostCores
		changed = true
	}
	return changed
}

// readyReplicas makes the replicas whose cold start is over serve.
func (s *sim) readyReplicas() (changed bool) {
	for _, j := range s.jobs {
		n := 0
		for n < len(j.starts) && j.starts[n] <= s.now {
			n++
		}
		if n > 0 {
			j.starts = j.starts[n:]
			j.ready += n
			j.settled = 0
			changed = true
		}
	}
	return changed
}

// arrival is when t may start: its submission under a scheduler
// (Model.QueueGPUs), else when the trace started it.
func (s *sim) arrival(t *Task) float64 {
	if s.m.QueueGPUs > 0 {
		return t.Arrival
	}
	return t.Start
}

// rates are a job's preprocessing and training rates now. Static's data
// loader feeds its trainer at the lower of the two's rates. Sluice's
// serving replicas preprocess ahead of the trainer into the job's output
// buffer until it is full (then at the trainer's pace) or the job's
// samples are all made; the trainer trains at its own rate while the
// buffer holds any, at the replicas' once it is empty.
func (s *sim) rates(j *job) (made, eaten float64) {
	if s.policy == Static {
		r := staticRate(*j.t)
		return r, r
	}
	supply := float64(j.ready) * j.perRep * s.share
	if j.t.Samples-j.made <= j.eps() {
		supply = 0
	}
	eaten = min(j.t.TrainerRate, supply)
	if j.buffered() > j.eps() {
		eaten = j.t.TrainerRate
	}
	made = supply
	if j.buffered() >= j.t.BufferSamples-j.eps() {
		made = min(made, eaten)
	}
	return made, eaten
}

// untilChange is the time until one of j's rates changes by itself: its
// samples all made or trained, its buffer empty, full or crossing the
// policy's full mark.
func (s *sim) untilChange(j *job) float64 {
	made, eaten := s.rates(j)
	t := math.Inf(1)
	if made > 0 {
		t = min(t, (j.t.Samples-j.made)/made)
	}
	if eaten > 0 {
		t = min(t, (j.t.Samples-j.eaten)/eaten)
	}
	b := j.buffered()
	for _, mark := range []float64{0, fullMark * j.t.BufferSamples, j.t.BufferSamples} {
		switch {
		case made > eaten && b < mark-j.eps():
			t = min(t, (mark-b)/(made-eaten))
		case eaten > made && b > mark+j.eps():
			t = min(t, (b-mark)/(eaten-made))
		}
	}
	return max(t, 0)
}

// shareCores sets share where replicas may outnumber the cores
// (Cluster.MaxReplicas): the serving replicas split the pool's cores
// evenly, a replica whose trainer is fed idling for the rest of its
// share (water-filling), as processes on one machine do.
func (s *sim) shareCores() {
	s.share = 1
	if s.cl.MaxReplicas == 0 || s.policy == Static {
		return
	}
	pool := s.poolCores()
	used := func(share float64) float64 {
		u := 0.0
		for _, j := range s.jobs {
			// Replicas work flat out while the buffer has room, at the
			// trainer's pace once it is full, not at all once done.
			need := math.Inf(1)
			switch {
			case j.t.Samples-j.made <= j.eps():
				need = 0
			case j.buffered() >= j.t.BufferSamples-j.eps():
				need = j.t.TrainerRate * j.t.CPUPerSample
			}
			u += min(float64(j.ready)*s.m.ReplicaCores*share, need)
		}
		return u
	}
	if used(1) <= pool {
		return
	}
	lo, hi := 0.0, 1.0
	for range 50 {
		mid := (lo + hi) / 2
		if used(mid) > pool {
			hi = mid
		} else {
			lo = mid
		}
	}
	s.share = lo
}

// advance moves the clock to t, training every job at its rate.
func (s *sim) advance(t float64) {
	dt := t - s.now
	s.sample(t)
	if dt > 0 {
		for _, j := range s.jobs {
			made, eaten := s.rates(j)
			if eaten > 0 && !j.fed {
				j.fed, j.res.FirstBatch = true, s.now-s.arrival(j.t)-j.res.Wait
			}
			j.made = min(j.made+made*dt, j.t.Samples)
			j.eaten = min(j.eaten+eaten*dt, j.made)
			j.res.Stall += float64(j.t.Readers) * (1 - eaten/j.t.TrainerRate) * dt
			if s.policy == Static {
				j.res.CoreSeconds += (j.t.Cores - j.t.HostCores) * dt
			} else {
				j.res.CoreSeconds += float64(j.ready+len(j.starts)) * s.m.ReplicaCores * dt
			}
		}
	}
	s.now = t
}

// capacity is the replicas the pool holds now: the running tasks' data
// loader cores and the lendable share of the idle ones, within the cores
// the trainers and the CPU-only tasks leave (requests may oversubscribe a
// job list's machine).
// A job list with Cluster.MaxReplicas has that many instead: replicas
// then share the cores (shareCores).
func (s *sim) capacity() int {
	if s.cl.MaxReplicas > 0 {
		return min(s.cl.MaxReplicas, 100000)
	}
	return int(min(math.Floor(s.poolCores()/s.m.ReplicaCores+1e-9), 100000))
}

// poolCores are the cores Sluice's replicas may use now.
func (s *sim) poolCores() float64 {
	idle := max(s.cl.Cores-s.usedCores, 0)
	pool := max(s.dataCores, 0) + s.m.Lendable*idle
	return min(pool, max(s.cl.Cores-s.hostCores-(s.usedCores-s.dataCores-s.hostCores), 0))
}

// demand is the signal a job's trainer agent would send: the samples
// arriving and trained per second, the buffer's fill, and the stall of a
// trainer whose buffer ran dry.
func (s *sim) demand(j *job) wire.Demand {
	made, eaten := s.rates(j)
	d := wire.Demand{Job: j.t.Name, IntervalS: tick, GPUUtilization: -1, ConsumedPerS: eaten, ArrivedPerS: made,
		BufferCapacity: int(math.Ceil(j.t.BufferSamples)), BufferedSamples: int(j.buffered())}
	if eaten < j.t.TrainerRate {
		d.StallFraction = 1 - eaten/j.t.TrainerRate
		d.WaitFraction = d.StallFraction
	}
	return d
}

// tasksLeft are j's shard tasks not yet done, as the dispatcher counts
// them: Decide wants no replica more than there are tasks.
func (j *job) tasksLeft() int {
	return int(math.Ceil((j.t.Samples - j.made - j.eps()) / j.t.ShardSamples))
}

// round is one control round, autoscale.Round as autoscale.Runner.Tick
// runs it: Decide per job (settled jobs reuse their bid), share the
// capacity, then scale. The allocator counts a job's grant as its
// current replicas (the runner counts its ready ones).
func (s *sim) round() {
	s.ticks++
	now := simTime(s.now)
	in := make([]autoscale.RoundJob, len(s.jobs))
	for i, j := range s.jobs {
		in[i] = autoscale.RoundJob{Name: j.t.Name, Config: j.cfg, State: j.st, Weight: 1, Appetite: j.bid.Appetite,
			ZeroSince: j.zeroSince, Current: j.granted, Settled: j.settled >= 2 && !s.baselinePolicy(), Bid: j.bid}
		if !in[i].Settled {
			d := s.demand(j)
			in[i].Inputs = autoscale.Inputs{Demand: &d, DemandAt: now, Pending: max(j.tasksLeft(), 0), Ready: j.ready}
		}
	}
	res := s.pol.Round(in, s.capacity(), now)
	if s.baselinePolicy() {
		s.grantPool(res)
	}
	unsettled := s.baselinePolicy() && len(s.jobs) > 0
	for i, j := range s.jobs {
		r := res[i]
		if r.Decided {
			s.decides++
			j.settle(in[i], r, s.share)
		}
		j.st, j.bid, j.zeroSince = r.Next, r.Bid, r.ZeroSince
		if r.Granted != j.granted {
			s.scale(j, r.Granted)
			j.settled = 0
		}
		if j.settled < 2 || !j.zeroSince.IsZero() {
			unsettled = true
		}
	}
	s.nextTick = math.Inf(1)
	if unsettled {
		s.nextTick = s.now + tick
	}
}

// grantPool cuts a baseline's counts, which know of no pool, to the
// pool's capacity: fairly (autoscale.Allocate) when they exceed it, as
// pods the cluster cannot place stay pending.
func (s *sim) grantPool(res []autoscale.RoundResult) {
	claims := make(map[string]autoscale.Claim, len(res))
	for _, r := range res {
		claims[r.Name] = autoscale.Claim{Want: r.Decision.Replicas}
	}
	g := autoscale.Allocate(claims, s.capacity())
	for i := range res {
		res[i].Granted = g[res[i].Name]
	}
}

// simTime is the virtual clock at t seconds.
func simTime(t float64) time.Time {
	return time.Unix(0, 0).Add(time.Duration(t * float64(time.Second)))
}

// settle counts the rounds in a row in which j decided the same from the
// same inputs (in) with nothing else in its scale-down window (r.Next);
// two make it settled. Decide reads the tasks left only as a ceiling,
// which matters only near the end.
func (j *job) settle(in autoscale.RoundJob, r autoscale.RoundResult, share float64) {
	raw := -1
	if n := len(r.Next.Wants); n > 0 {
		raw = r.Next.Wants[n-1].Replicas
		for _, w := range r.Next.Wants {
			if w.Replicas != raw {
				raw = -1
			}
		}
	}
	prev := in.State.PerReplica
	key := [7]float64{float64(r.Bid.Want), float64(raw), float64(j.ready), float64(j.granted), float64(j.phase), share,
		float64(min(in.Inputs.Pending, 64))}
	if raw >= 0 && key == j.lastKey && math.Abs(r.Next.PerReplica-prev) <= 1e-9*max(prev, 1) {
		j.settled++
	} else {
		j.settled = 0
	}
	j.lastKey = key
}

// scale is the actuator: new replicas serve after the cold start; those
// removed go at once, starting ones first.
func (s *sim) scale(j *job, n int) {
	for j.granted < n {
		j.starts = append(j.starts, s.now+s.m.ColdStart.Seconds())
		j.granted++
	}
	for j.granted > n {
		if k := len(j.starts); k > 0 {
			j.starts = j.starts[:k-1]
		} else {
			j.ready--
		}
		j.granted--
	}
}

func (s *sim) result() Result {
	jobs := append([]JobResult(nil), s.done...)
	for _, j := range s.jobs { // cut short by ctx
		j.res.JCT = s.now - s.arrival(j.t)
		jobs = append(jobs, j.res)
	}
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].Name < jobs[b].Name })
	return Result{Jobs: jobs, Ticks: s.ticks, Decides: s.decides, Timeline: s.timeline}
}

// sample records the cluster at each Model.SampleEvery mark before t: it
// holds from the clock to t.
func (s *sim) sample(t float64) {
	every := s.m.SampleEvery.Seconds()
	if every <= 0 {
		return
	}
	for ; s.nextSample < t; s.nextSample += every {
		p := Sample{T: s.nextSample}
		for _, j := range s.jobs {
			_, eaten := s.rates(j)
			p.Stalled += float64(max(j.t.Readers, 1)) * (1 - eaten/j.t.TrainerRate)
			if s.policy == Static {
				p.ReservedCores += j.t.Cores - j.t.HostCores
				continue
			}
			p.Replicas += j.ready + len(j.starts)
			p.ReservedCores += float64(j.ready+len(j.starts)) * s.m.ReplicaCores
		}
		s.timeline = append(s.timeline, p)
	}
}
