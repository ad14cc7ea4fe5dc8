package controller

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/internal/sat"
	"github.com/sluice-project/sluice/wire"
)

// Bounds on what demand signals, which anyone who may publish on a job's
// demand subject can send, make the controller keep per job.
const (
	// MaxAgentsPerJob bounds the agents kept per job: the job's dispatch
	// plan shares its in-flight budget among them, and must stay one
	// NATS message. One more replaces a stale one, or is refused.
	MaxAgentsPerJob = 1024
	// MaxAgentNameBytes bounds an agent's name (a host name and a pid).
	MaxAgentNameBytes = 256
)

// Why a signal was refused (the reason label of
// sluice_autoscale_demand_refused_total).
const (
	refusedUndeclaredReader = "undeclared_reader"
	refusedTooManyReaders   = "too_many_readers"
	refusedAgentName        = "agent_name"
	refusedTooManyAgents    = "too_many_agents"
	refusedOutOfBounds      = "out_of_bounds"
	refusedNodeSeal         = "node_seal"  // not sealed by a node the job's key certifies
	refusedOtherNode        = "other_node" // naming an agent other than the node that sealed it
)

// signalKey names one agent's signals for one reader: the agents of a
// reader's team (one per node) each publish under the reader's name, each
// for the ranks it serves.
type signalKey struct{ reader, agent string }

// jobSignals are one job's latest signal of each agent for each reader.
type jobSignals struct {
	readers []string // declared; none: any, up to wire.MaxReaders
	latest  map[signalKey]autoscale.Signal
	// seen is when each agent was last heard, for its readers: the bound
	// on agents; readerKeys counts each reader's keys: the bound on readers.
	seen       map[string]time.Time
	readerKeys map[string]int
	// check checks the signals' node seals (nil: the job's record has no
	// node key, and its signals are not sealed).
	check *wire.NodeVerifier
}

// demandBook keeps the agents' demand signals of the jobs that run here,
// and is the one place they are read from: the autoscaler's inputs
// (each reader's team merged, mergeTeam), the backlog and dispatch plan
// (each agent's load) and the job's status. It is a plain type, not safe
// for concurrent use: the controller locks around it.
type demandBook struct {
	jobs map[string]*jobSignals
}

func newDemandBook() *demandBook { return &demandBook{jobs: map[string]*jobSignals{}} }

// addJob starts keeping the signals of job id, whose declared readers
// are readers; a job kept already keeps its signals.
func (b *demandBook) addJob(id string, readers []string) {
	if j, ok := b.jobs[id]; ok {
		j.readers = slices.Clone(readers)
		return
	}
	b.jobs[id] = &jobSignals{readers: slices.Clone(readers), latest: map[signalKey]autoscale.Signal{},
		seen: map[string]time.Time{}, readerKeys: map[string]int{}}
}

// sealedBy has job id's signals checked by check: each must be sealed by
// a node the job's key certifies, and name that node as its agent.
func (b *demandBook) sealedBy(id string, check *wire.NodeVerifier) {
	if j, ok := b.jobs[id]; ok {
		j.check = check
	}
}

// unseal checks a signal of job, data with its headers, before it is
// read: the node that sealed it ("" for a job whose signals are not
// sealed, or not kept here), or why it is refused.
func (b *demandBook) unseal(job string, header map[string][]string, data []byte) (node, refused string, err error) {
	j, ok := b.jobs[job]
	if !ok || j.check == nil {
		return "", "", nil
	}
	node, err = j.check.Verify(wire.SealOfHeader(header), wire.SealDemand, nil, data)
	if err != nil {
		return "", refusedNodeSeal, err
	}
	return node, "", nil
}

// removeJob forgets job id's signals.
func (b *demandBook) removeJob(id string) { delete(b.jobs, id) }

// observe keeps d, received at at, as its agent's latest for its reader,
// and says why not where it refuses it: a count out of its bounds
// (wire.Demand.CheckCounts), a reader the job does not declare
// (one of more than wire.MaxReaders where it declares none), an agent
// name over MaxAgentNameBytes, an agent beyond MaxAgentsPerJob (one more
// takes the place of an agent silent for longer than stale). A signal of
// a job not kept, or older than the one kept, is dropped without a
// reason.
func (b *demandBook) observe(d wire.Demand, at time.Time, stale time.Duration) (refused string) {
	j, ok := b.jobs[d.Job]
	if !ok {
		return ""
	}
	if d.CheckCounts() != nil {
		return refusedOutOfBounds
	}
	k := signalKey{d.ReaderName(), d.Agent}
	if why := j.refuse(k, at, stale); why != "" {
		return why
	}
	if o, ok := j.latest[k]; ok {
		if o.At.After(at) {
			return ""
		}
	} else {
		j.readerKeys[k.reader]++
	}
	j.latest[k] = autoscale.Signal{Demand: d, At: at}
	if at.After(j.seen[k.agent]) {
		j.seen[k.agent] = at
	}
	return ""
}

// refuse says why a signal under k is not kept (empty: it is); a new
// agent over the cap takes the place of one silent for longer than
// stale, if there is one.
func (j *jobSignals) refuse(k signalKey, at time.Time, stale time.Duration) string {
	if len(j.readers) > 0 && !slices.Contains(j.readers, k.reader) {
		return refusedUndeclaredReader
	}
	if _, known := j.readerKeys[k.reader]; !known && len(j.readers) == 0 && len(j.readerKeys) >= wire.MaxReaders {
		return refusedTooManyReaders
	}
	if len(k.agent) > MaxAgentNameBytes {
		return refusedAgentName
	}
	if _, known := j.seen[k.agent]; known || len(j.seen) < MaxAgentsPerJob {
		return ""
	}
	for _, name := range slices.Sorted(maps.Keys(j.seen)) {
		if at.Sub(j.seen[name]) > stale {
			j.dropAgent(name)
			return ""
		}
	}
	return refusedTooManyAgents
}

// dropAgent forgets agent's signals.
func (j *jobSignals) dropAgent(agent string) {
	for k := range j.latest {
		if k.agent == agent {
			delete(j.latest, k)
			if j.readerKeys[k.reader]--; j.readerKeys[k.reader] <= 0 {
				delete(j.readerKeys, k.reader)
			}
		}
	}
	delete(j.seen, agent)
}

// agents returns each named agent's latest signal over its readers: an
// agent's dispatch load (InFlight, PendingTasks) is the same in each of
// its readers' signals, and counts once. Signals naming no agent are not
// among them.
func (b *demandBook) agents(job string) map[string]autoscale.Signal {
	j, ok := b.jobs[job]
	if !ok {
		return nil
	}
	out := map[string]autoscale.Signal{}
	for k, s := range j.latest {
		if k.agent == "" {
			continue
		}
		if o, ok := out[k.agent]; !ok || s.At.After(o.At) {
			out[k.agent] = s
		}
	}
	return out
}

// readers returns each reader's signal: its team's signals merged
// (mergeTeam) at now.
func (b *demandBook) readers(job string, now time.Time, stale time.Duration) map[string]autoscale.Signal {
	j, ok := b.jobs[job]
	if !ok {
		return nil
	}
	teams := map[string][]autoscale.Signal{}
	for k, s := range j.latest {
		teams[k.reader] = append(teams[k.reader], s)
	}
	out := make(map[string]autoscale.Signal, len(teams))
	for r, team := range teams {
		out[r] = mergeTeam(team, now, stale)
	}
	return out
}

// mergeTeam is one reader's signal from the latest signal of each agent
// serving its ranks (a team: one agent per node, each for its own ranks;
// a lone agent is a team of one and its signal comes back as it is).
//
// The agents that count are those heard within stale of now or done (a
// done agent sends no more, and what it did still counts); if none is,
// all of them, the merged signal then as old as the newest. Of those, the
// agents still working (not done) make the rates:
//
//   - ConsumedPerS, ArrivedPerS, the buffer, in flight and pending: the
//     sum (each agent feeds and holds for its own ranks);
//   - StallFraction and WaitFraction: the most (the ranks of one trainer
//     step together: the most starved agent holds all of them);
//   - GPUUtilization: the mean of the agents that read one;
//   - Step: merged, the ranks added up.
//
// SamplesDone is the sum over every agent that counts, done or not (each
// counts the samples handed to its own ranks once); SamplesTotal the
// largest. The reader is done only when every agent that counts is: a
// member that finished its ranks first does not end the reader while the
// planner still hands out.
func mergeTeam(team []autoscale.Signal, now time.Time, stale time.Duration) autoscale.Signal {
	if len(team) == 1 {
		return team[0]
	}
	team = slices.Clone(team)
	slices.SortFunc(team, func(a, b autoscale.Signal) int {
		return cmp.Compare(a.Demand.Agent, b.Demand.Agent)
	})
	var live []autoscale.Signal
	for _, s := range team {
		if s.Demand.Done || now.Sub(s.At) <= stale {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		live = team
	}
	var out autoscale.Signal
	d := &out.Demand
	d.Job, d.Reader = live[0].Demand.Job, live[0].Demand.Reader
	d.GPUUtilization = -1
	gpu, gpus := 0.0, 0
	working := 0
	var steps []wire.StepTimes
	d.Done = true
	for _, s := range live {
		sd := s.Demand
		if s.At.After(out.At) {
			out.At = s.At
		}
		if sd.Time.After(d.Time) {
			d.Time = sd.Time
		}
		d.SamplesDone = sat.Add64(d.SamplesDone, max(sd.SamplesDone, 0))
		d.SamplesTotal = max(d.SamplesTotal, sd.SamplesTotal)
		if sd.Done {
			continue
		}
		d.Done = false
		working++
		d.InFlight = sat.Sum(d.InFlight, sd.InFlight)
		d.PendingTasks = sat.Sum(d.PendingTasks, sd.PendingTasks)
		d.BufferedSamples = sat.Sum(d.BufferedSamples, sd.BufferedSamples)
		d.BufferCapacity = sat.Sum(d.BufferCapacity, sd.BufferCapacity)
		d.IntervalS = max(d.IntervalS, sd.IntervalS)
		d.ConsumedPerS += max(sd.ConsumedPerS, 0)
		d.ArrivedPerS += max(sd.ArrivedPerS, 0)
		if working == 1 || sd.WaitFraction > d.WaitFraction {
			d.WaitFraction, d.WaitSource = sd.WaitFraction, sd.WaitSource
		}
		d.StallFraction = max(d.StallFraction, sd.StallFraction)
		if sd.GPUUtilization >= 0 {
			gpu += sd.GPUUtilization
			gpus++
		}
		steps = append(steps, sd.Step)
	}
	if gpus > 0 {
		d.GPUUtilization = gpu / float64(gpus)
	}
	d.Step = autoscale.MergeSteps(steps...)
	return out
}

// listenDemand subscribes to every job's demand signals
// (wire.DemandSubjects) and keeps those of the jobs run here (observe),
// until stop is called.
func (c *Controller) listenDemand() (stop func(), err error) {
	prefix := strings.TrimSuffix(wire.DemandSubjects, "*")
	sub, err := c.opts.NC.Subscribe(wire.DemandSubjects, func(m *nats.Msg) {
		// The subject names the job; a signal cannot speak for another.
		job := strings.TrimPrefix(m.Subject, prefix)
		c.demandMu.Lock()
		node, why, err := c.demand.unseal(job, m.Header, m.Data)
		c.demandMu.Unlock()
		if why != "" {
			c.refuseDemand(job, why, err)
			return
		}
		var d wire.Demand
		if err := json.Unmarshal(m.Data, &d); err != nil {
			c.log.Warn("ignoring a malformed demand signal", "subject", m.Subject, "err", err)
			return
		}
		d.Job = job
		if node != "" && d.Agent != node {
			c.refuseDemand(job, refusedOtherNode, fmt.Errorf("a signal naming agent %.64q sealed by node %s: a node acting as another", d.Agent, node))
			return
		}
		c.observeDemand(d, time.Now())
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", wire.DemandSubjects, err)
	}
	if err := c.opts.NC.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribing to %s: %w", wire.DemandSubjects, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// observeDemand keeps demand signal d received at at (demandBook.observe),
// counting and logging one refused.
func (c *Controller) observeDemand(d wire.Demand, at time.Time) {
	c.demandMu.Lock()
	why := c.demand.observe(d, at, c.opts.Autoscale.DemandStale)
	c.demandMu.Unlock()
	if why != "" {
		c.m.refused.WithLabelValues(why).Inc()
		c.log.Debug("refusing a demand signal", "job", d.Job, "reader", d.ReaderName(), "agent", d.Agent, "why", why, "err", d.CheckCounts())
	}
}

// refuseDemand counts and logs a signal refused for its seal.
func (c *Controller) refuseDemand(job, why string, err error) {
	c.m.refused.WithLabelValues(why).Inc()
	if ok, left := c.sealLogs.Allow(why, time.Now()); ok {
		c.log.Warn("refusing a demand signal", "job", job, "why", why, "unlogged_since", left, "err", err)
	}
}

// agentSignals is each agent's latest signal of job (demandBook.agents).
func (c *Controller) agentSignals(job string) map[string]autoscale.Signal {
	c.demandMu.Lock()
	defer c.demandMu.Unlock()
	return c.demand.agents(job)
}

// readerSignals is each reader's signal of job, its team merged, at now.
func (c *Controller) readerSignals(job string, now time.Time) map[string]autoscale.Signal {
	c.demandMu.Lock()
	defer c.demandMu.Unlock()
	return c.demand.readers(job, now, c.opts.Autoscale.DemandStale)
}

// backlogCounts are job's tasks from its backlog (nil: none read yet) and
// its agents' load at now.
func (c *Controller) backlogCounts(job string, b *taskBacklog, now time.Time) backlogCounts {
	if b == nil {
		return backlogCounts{}
	}
	_, inFlight, wanted := agentLoad(c.agentSignals(job), now, c.opts.Autoscale.DemandStale)
	return b.counts(inFlight, wanted)
}

// autoscaleInputs are what the autoscaler decides each job running here
// from at now: its demand (each reader's team merged, then the job's
// readers aggregated: autoscale.Aggregate) and its backlog.
func (c *Controller) autoscaleInputs(now time.Time) map[string]autoscale.Inputs {
	stale := c.opts.Autoscale.DemandStale
	in := map[string]autoscale.Inputs{}
	for _, jr := range c.runs() {
		jr.mu.Lock()
		job, backlog := jr.job, jr.backlog
		jr.mu.Unlock()
		if backlog == nil {
			continue // not given to the autoscaler yet
		}
		var i autoscale.Inputs
		i.Demand, i.DemandAt = autoscale.Aggregate(c.readerSignals(jr.id, now), job.Spec.Readers, now, stale)
		b := c.backlogCounts(jr.id, backlog, now)
		i.Pending, i.InFlight, i.Done = b.Pending, b.InFlight, b.Done
		in[jr.id] = i
	}
	return in
}
