package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/wire"
)

// failedShown is how many failed shards a status summary lists.
const failedShown = 5

// printStatus writes the human summary of `sluice job status`.
func printStatus(w io.Writer, job wire.Job, st wire.JobStatus) {
	spec := job.Spec
	fmt.Fprintf(w, "job %s: %s", spec.ID, job.State)
	if job.Reason != "" {
		fmt.Fprintf(w, " (%s)", job.Reason)
	}
	fmt.Fprintln(w)
	if len(spec.Sources) == 0 {
		fmt.Fprintf(w, "  dataset   %s: %d shards\n", spec.Dataset, len(job.Shards))
	}
	for i, src := range spec.Sources {
		if i < len(job.Sources) {
			fmt.Fprintf(w, "  source %d  %s, weight %g: %d shards of an epoch (%d listed)\n", i, src.Dataset, src.Weight, job.Sources[i].Slots, job.Sources[i].Listed)
		}
	}
	fmt.Fprintf(w, "  pipeline  %s, batch size %d, seed %d, readers %s\n", pipelineName(spec.Pipeline), spec.BatchSize, spec.Seed, strings.Join(spec.Readers, ", "))
	fmt.Fprintf(w, "  submitted %s\n", job.Submitted.Local().Format(time.DateTime))
	if !broker.HasStatus(st) {
		switch {
		case job.State == wire.JobQueued:
			fmt.Fprintln(w, "  no progress yet: no controller has taken the job (is `sluice controller` running?)")
		default:
			fmt.Fprintln(w, "  no progress was recorded")
		}
		fmt.Fprintf(w, "  tasks     %d (%d shards x %d epochs)\n", job.Tasks(), len(job.Shards), spec.Epochs)
		return
	}
	fmt.Fprintf(w, "  owner     %s, status from %s ago\n", orNone(st.Owner), time.Since(st.Updated).Round(time.Second))
	t := st.Tasks
	fmt.Fprintf(w, "  tasks     %d/%d done, %d failed, %d in flight, %d pending, %d redelivered\n",
		t.Done, t.Total, t.Failed, t.InFlight, t.Pending, t.Redeliveries)
	if len(st.TasksDonePerEpoch) > 0 {
		parts := make([]string, len(st.TasksDonePerEpoch))
		for i, n := range st.TasksDonePerEpoch {
			parts[i] = fmt.Sprintf("%d: %d/%d", i, n, len(job.Shards))
		}
		fmt.Fprintf(w, "  epochs    %s\n", strings.Join(parts, ", "))
	}
	for i, p := range st.Sources {
		fmt.Fprintf(w, "  source %d  %d/%d tasks done, %d samples processed\n", i, p.TasksDone, p.Tasks, p.SamplesProcessed)
	}
	fmt.Fprintf(w, "  samples   %d processed, %d failed", st.SamplesProcessed, st.SamplesFailed)
	if st.SamplesExpected > 0 {
		fmt.Fprintf(w, " of %d expected", st.SamplesExpected)
	}
	fmt.Fprintln(w)
	printReads(w, st)
	if st.Step.Steps > 0 {
		fmt.Fprintf(w, "  step      %s over %d %s of %d %s\n", stepSplit(st.Step),
			st.Step.Steps, plural(int(st.Step.Steps), "step", "steps"), st.Step.Ranks, plural(st.Step.Ranks, "rank", "ranks"))
	}
	printReaders(w, st)
	fmt.Fprintf(w, "  replicas  %d (%d ready)", st.Replicas, st.ReadyReplicas)
	if st.ScaleReason != "" {
		fmt.Fprintf(w, ": %s", st.ScaleReason)
	}
	fmt.Fprintln(w)
	printFailedShards(w, st)
}

// printReaders prints a line for each reader of the job, by name.
func printReaders(w io.Writer, st wire.JobStatus) {
	readers := make([]string, 0, len(st.Readers))
	for r := range st.Readers {
		readers = append(readers, r)
	}
	sort.Strings(readers)
	for _, r := range readers {
		rs := st.Readers[r]
		done := ""
		if rs.Done {
			done = ", done"
		}
		gpu := ""
		if rs.GPUUtilization != nil {
			gpu = fmt.Sprintf(", gpu %.0f%%", 100**rs.GPUUtilization)
		}
		step := ""
		if len(readers) > 1 && rs.Step.Steps > 0 {
			step = ", step " + stepSplit(rs.Step) // the job's line above covers a single reader
		}
		fmt.Fprintf(w, "  reader    %s: %d delivered, stall %.0f%%, %.0f samples/s%s%s%s\n", r, rs.SamplesDelivered, 100*rs.StallFraction, rs.ConsumedPerS, gpu, step, done)
	}
}

// printFailedShards prints the shards given up on, the first few by name.
func printFailedShards(w io.Writer, st wire.JobStatus) {
	// The status lists the first failures only; Tasks.Failed counts all.
	t := st.Tasks
	if n := max(t.Failed, len(st.FailedShards)); n > 0 {
		fmt.Fprintf(w, "  failed    %d %s given up on\n", n, plural(n, "shard", "shards"))
		shown := st.FailedShards[:min(len(st.FailedShards), failedShown)]
		for _, f := range shown {
			fmt.Fprintf(w, "    %s: %s\n", f.Key, f.Reason)
		}
		if more := n - len(shown); more > 0 && len(st.FailedShards) > len(shown) {
			fmt.Fprintf(w, "    ... %d more (--json lists the first %d)\n", more, len(st.FailedShards))
		} else if more > 0 {
			fmt.Fprintf(w, "    ... %d more\n", more)
		}
	}
}

// printReads shows where the job's shards were read from, per epoch.
func printReads(w io.Writer, st wire.JobStatus) {
	if len(st.S3BytesPerEpoch) == 0 {
		return
	}
	parts := make([]string, len(st.S3BytesPerEpoch))
	for i, n := range st.S3BytesPerEpoch {
		parts[i] = fmt.Sprintf("%d: %s", i, bytesize.Format(n))
	}
	fmt.Fprintf(w, "  s3 read   %s\n", strings.Join(parts, ", "))
	var cached int64
	for _, n := range st.CacheBytesPerEpoch {
		cached += n
	}
	if reads := st.CacheHits + st.CacheMisses; reads > 0 {
		fmt.Fprintf(w, "  cache     %d of %d shard reads hit (%.0f%%; %d in a replica's memory), %s from the replicas' caches\n",
			st.CacheHits, reads, 100*float64(st.CacheHits)/float64(reads), st.CacheMemoryHits, bytesize.Format(cached))
	}
}

// stepSplit shows a mean step and its parts: "0.412 s: wait 12%, compute
// 73%, other 15%".
func stepSplit(t wire.StepTimes) string {
	step := t.StepS()
	if step <= 0 {
		return "0 s"
	}
	pct := func(x float64) float64 { return 100 * x / step }
	return fmt.Sprintf("%s: wait %.0f%%, compute %.0f%%, other %.0f%%", seconds(step), pct(t.WaitS), pct(t.ComputeS), pct(t.OtherS))
}

// seconds shows a step's length with three significant digits.
func seconds(s float64) string {
	return strconv.FormatFloat(s, 'g', 3, 64) + " s"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// listRow is one job of `sluice job list`, with its status if it has one.
type listRow struct {
	job    wire.Job
	status *wire.JobStatus
}

// printList writes the table of `sluice job list`.
func printList(w io.Writer, rows []listRow) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTASKS DONE\tREPLICAS\tPIPELINE\tDATASET\tSUBMITTED")
	for _, r := range rows {
		done, replicas := "-", "-"
		if r.status != nil {
			done = fmt.Sprintf("%d/%d", r.status.Tasks.Done, r.job.Tasks())
			replicas = fmt.Sprint(r.status.Replicas)
		} else {
			done = fmt.Sprintf("-/%d", r.job.Tasks())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.job.Spec.ID, r.job.State, done, replicas,
			pipelineName(r.job.Spec.Pipeline), r.job.Spec.Dataset, r.job.Submitted.Local().Format(time.DateTime))
	}
	_ = tw.Flush()
}

// watchEvery is how often at most `job status --watch` prints a status
// that has not changed state, where it cannot redraw (a log).
const watchEvery = 5 * time.Second

// watchView shows a watched job: redrawn in place on a terminal;
// elsewhere printed at each change of state and every watchEvery at most,
// the last status always.
type watchView struct {
	w         io.Writer
	tty       bool
	lines     int // drawn last, on a terminal
	printed   time.Time
	lastState wire.JobState
	pending   []byte // the latest status not printed yet
}

func newWatchView(w io.Writer) *watchView {
	v := &watchView{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			v.tty = true
		}
	}
	return v
}

func (v *watchView) show(job wire.Job, st wire.JobStatus) {
	var b bytes.Buffer
	printStatus(&b, job, st)
	if v.tty {
		if v.lines > 0 {
			fmt.Fprintf(v.w, "\033[%dA\033[J", v.lines)
		}
		_, _ = v.w.Write(b.Bytes())
		v.lines = bytes.Count(b.Bytes(), []byte("\n"))
		return
	}
	v.pending = b.Bytes()
	if job.State != v.lastState || time.Since(v.printed) >= watchEvery {
		v.flush()
	}
	v.lastState = job.State
}

// end prints the last status if it was held back.
func (v *watchView) end() {
	if !v.tty {
		v.flush()
	}
}

func (v *watchView) flush() {
	if v.pending == nil {
		return
	}
	_, _ = v.w.Write(v.pending)
	fmt.Fprintln(v.w)
	v.pending, v.printed = nil, time.Now()
}
