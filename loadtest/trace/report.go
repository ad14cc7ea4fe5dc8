package trace

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// Comparison is one model's run of every policy over the same tasks.
type Comparison struct {
	Model Model
	// InputBound is the share of tasks that are input-bound (InputBound):
	// their static data loader cores cannot keep their trainer busy.
	InputBound float64
	// Summaries are over all the tasks that finished within the trace;
	// Bound the same over the input-bound ones only.
	Summaries
	Bound Summaries
	// BoundSlowdown is the median, over the input-bound tasks, of how
	// much slower than its trainer's rate static trains it (trainer rate
	// over static rate; 0 without such tasks): how input-bound they are.
	BoundSlowdown float64
	Results       []Result
	Wall          time.Duration
}

// Summaries are one class of tasks' summaries under each policy.
type Summaries struct {
	Static, Sluice, Fair Summary
}

// JCTRatio is static's average completion time over Sluice's (above 1:
// Sluice finishes sooner); UtilRatio Sluice's GPU utilisation over
// static's; CoreRatio Sluice's preprocessing core-hours over static's.
// Over a class without tasks they are NaN.
func (c Summaries) JCTRatio() float64  { return c.Static.MeanJCT / c.Sluice.MeanJCT }
func (c Summaries) UtilRatio() float64 { return c.Sluice.GPUUtil / c.Static.GPUUtil }
func (c Summaries) CoreRatio() float64 { return c.Sluice.CoreHours / c.Static.CoreHours }

// FairJCTRatio and FairUtilRatio are JCTRatio and UtilRatio with the
// fair split instead of the marginal allocator.
func (c Summaries) FairJCTRatio() float64  { return c.Static.MeanJCT / c.Fair.MeanJCT }
func (c Summaries) FairUtilRatio() float64 { return c.Fair.GPUUtil / c.Static.GPUUtil }

// InputBound tells whether t, drawn (Prepare), is input-bound: the cores
// its request leaves its data loader, less its trainer's own, preprocess
// fewer samples/s than its trainer eats at full speed, so under static
// allocation its GPUs wait for data.
func InputBound(t Task) bool {
	return staticRate(t) < t.TrainerRate*(1-1e-9)
}

// Compare runs static, Sluice (marginal allocator) and Sluice with the
// fair split over tr under m.
func Compare(ctx context.Context, tr Trace, m Model) (Comparison, error) {
	start := time.Now()
	c := Comparison{Model: m}
	tasks := Prepare(tr, m)
	bound := map[string]bool{}
	var slowdowns []float64
	for _, t := range tasks {
		if InputBound(t) {
			bound[t.Name] = true
			slowdowns = append(slowdowns, t.TrainerRate/staticRate(t))
		}
	}
	if len(tasks) > 0 {
		c.InputBound = float64(len(bound)) / float64(len(tasks))
	}
	c.BoundSlowdown = median(slowdowns)
	for _, p := range []Policy{Static, Sluice, SluiceFair} {
		r, err := Simulate(ctx, tr, tasks, m, p)
		if err != nil {
			return c, fmt.Errorf("simulating %s: %w", p, err)
		}
		c.Results = append(c.Results, r)
		all, b := r.Summarize(), only(r, bound).Summarize()
		switch p {
		case Static:
			c.Static, c.Bound.Static = all, b
		case Sluice:
			c.Sluice, c.Bound.Sluice = all, b
		default:
			c.Fair, c.Bound.Fair = all, b
		}
	}
	c.Wall = time.Since(start)
	return c, nil
}

// only is r with the jobs named in names alone (task names are unique:
// ParseJobs refuses a job list that repeats one, and the trace's are).
func only(r Result, names map[string]bool) Result {
	r.Jobs = slices.DeleteFunc(slices.Clone(r.Jobs), func(j JobResult) bool { return !names[j.Name] })
	return r
}

// median is xs's median (0 for none); it sorts xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// Variation is one row of the sensitivity table: the model with one
// parameter (or a named pair) changed.
type Variation struct {
	Param, Value string
	Apply        func(*Model)
}

// Variations are the sensitivity table's rows, each from the default model.
func Variations() []Variation {
	v := []Variation{{"(default)", "", func(*Model) {}}}
	for _, x := range []float64{200, 1200, 3000} {
		v = append(v, Variation{"trainer samples/s per GPU (median)", fmt.Sprint(x), func(m *Model) { m.TrainerPerGPU = x }})
	}
	for _, x := range []float64{0.5, 1.5} {
		v = append(v, Variation{"trainer sigma", fmt.Sprint(x), func(m *Model) { m.TrainerSigma = x }})
	}
	for _, x := range []float64{1073, 311, 150} {
		v = append(v, Variation{"samples/s per core (median)", fmt.Sprint(x), func(m *Model) { m.PerCore = x }})
	}
	for _, x := range []float64{0.3, 1.2} {
		v = append(v, Variation{"per-core sigma", fmt.Sprint(x), func(m *Model) { m.PerCoreSigma = x }})
	}
	v = append(v, Variation{"host cores per GPU", "4", func(m *Model) { m.HostCoresPerGPU = 4 }})
	for _, x := range []float64{0.25, 0.05, 0} {
		v = append(v, Variation{"lendable share of idle cores", fmt.Sprint(x), func(m *Model) { m.Lendable = x }})
	}
	v = append(v, Variation{"replica cold start", "30s", func(m *Model) { m.ColdStart = 30 * time.Second }})
	v = append(v, Variation{"heavy: 1200/s per GPU, 150/s per core", "", func(m *Model) { m.TrainerPerGPU, m.PerCore = 1200, 150 }})
	v = append(v, Variation{"heavy, lendable 0", "", func(m *Model) { m.TrainerPerGPU, m.PerCore, m.Lendable = 1200, 150, 0 }})
	v = append(v, Variation{"heavier: 3000/s per GPU, 150/s per core", "", func(m *Model) { m.TrainerPerGPU, m.PerCore = 3000, 150 }})
	v = append(v, Variation{"heavier, lendable 0", "", func(m *Model) { m.TrainerPerGPU, m.PerCore, m.Lendable = 3000, 150, 0 }})
	// A scheduler instead of the trace's start times: the trace's tasks
	// use 66 GPUs at their peak (14 on average), so queues form below that.
	for _, n := range []int{64, 48, 32, 24} {
		v = append(v, Variation{"first come, first served on N GPUs", fmt.Sprint(n), func(m *Model) { m.QueueGPUs = n }})
	}
	for _, n := range []int{64, 48, 32} {
		v = append(v, Variation{"heavy, first come, first served on N GPUs", fmt.Sprint(n), func(m *Model) { m.TrainerPerGPU, m.PerCore, m.QueueGPUs = 1200, 150, n }})
	}
	return v
}

// Row is a Variation's comparison.
type Row struct {
	Variation
	Comparison
}

// Sensitivity runs Compare for every variation of base.
func Sensitivity(ctx context.Context, tr Trace, base Model, vs []Variation) ([]Row, error) {
	rows := make([]Row, 0, len(vs))
	for _, v := range vs {
		m := base
		v.Apply(&m)
		c, err := Compare(ctx, tr, m)
		if err != nil {
			return rows, fmt.Errorf("%s %s: %w", v.Param, v.Value, err)
		}
		c.Results = nil // keep the table's memory small
		rows = append(rows, Row{v, c})
	}
	return rows, nil
}

// PrintComparison writes a comparison's per-policy table.
func PrintComparison(w io.Writer, c Comparison) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tJOBS\tMEAN JCT\tGPU UTIL\tSTALL\tCORE-HOURS\tJCT VS STATIC\tUTIL VS STATIC\tTICKS\tSIM TIME")
	for i, s := range []Summary{c.Static, c.Sluice, c.Fair} {
		r := Result{}
		if i < len(c.Results) {
			r = c.Results[i]
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0fs\t%.1f%%\t%s\t%s\t%.2fx\t%.2fx\t%d\t%v\n", r.Policy, s.Jobs, s.MeanJCT, 100*s.GPUUtil,
			seconds(s.StallS), hours(s.CoreHours), c.Static.MeanJCT/s.MeanJCT, s.GPUUtil/c.Static.GPUUtil, r.Ticks, r.Wall.Round(time.Millisecond))
	}
	_ = tw.Flush()
}

// PrintSensitivity writes the sensitivity table as Markdown.
func PrintSensitivity(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| parameter | value | input-bound tasks (static) | JCT static/Sluice | GPU util Sluice/static | core-hours Sluice/static | JCT, fair split | GPU util, fair split |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %.1f%% | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx |\n", r.Param, r.Value, 100*r.InputBound,
			r.JCTRatio(), r.UtilRatio(), r.CoreRatio(), r.FairJCTRatio(), r.FairUtilRatio())
	}
}

// PrintJobs writes each job's completion time and stall under every
// policy of c: the figures a job list's calibration compares.
func PrintJobs(w io.Writer, c Comparison) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "JOB")
	for _, r := range c.Results {
		fmt.Fprintf(tw, "\t%s JCT\t%s STALL", r.Policy, r.Policy)
	}
	fmt.Fprintln(tw)
	if len(c.Results) == 0 {
		return
	}
	for i := range c.Results[0].Jobs {
		fmt.Fprint(tw, c.Results[0].Jobs[i].Name)
		for _, r := range c.Results {
			fmt.Fprintf(tw, "\t%.1fs\t%.1fs", r.Jobs[i].JCT, r.Jobs[i].Stall)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// seconds is a duration in the unit that reads best: hours from 10 h.
func seconds(s float64) string {
	if s >= 36000 {
		return fmt.Sprintf("%.0fh", s/3600)
	}
	return fmt.Sprintf("%.0fs", s)
}

// hours prints core-hours to the unit above 100, to 3 digits below.
func hours(h float64) string {
	if h >= 100 {
		return fmt.Sprintf("%.0f", h)
	}
	return fmt.Sprintf("%.3g", h)
}
