// Package trace is a trace-driven simulation of a GPU cluster's data
// preprocessing, `sluice loadtest trace`: the Alibaba PAI GPU cluster
// trace (cluster-trace-gpu-v2023, "openb": 1,213 nodes, 8,152 tasks; Weng
// et al., USENIX ATC'23) or a small job list, on virtual time, under two
// ways of giving CPUs to preprocessing:
//
//   - Static: each GPU task preprocesses on the cores it asked for in the
//     trace, on its own node, less the cores its trainer keeps for its own
//     loop (HostCoresPerGPU, at most half its request).
//   - Sluice: each task's preprocessing runs on function replicas drawn
//     from a pool: the data loader cores of every running task plus
//     Lendable of the cores no running task asked for. Each task's
//     replicas are sized by the real autoscale.Decide from the demand
//     signal its trainer agent would send, and the pool is shared by the
//     real autoscale.AllocateMarginal (or autoscale.Allocate, the fair
//     split), once a second as autoscale.Runner does; a new replica
//     serves after ColdStart.
//
// The trace has no data-stall figures, so every GPU task gets a demand
// model (Model): its trainer eats TrainerPerGPU samples/s per GPU (a
// share of one for GPU-sharing tasks) and one core preprocesses PerCore
// samples/s, each log-normal around its median, drawn per task from a
// seeded stream. The defaults are calibrated on this project's
// measurements: 449 samples/s per core is torchvision's ImageNet training
// transform on one core of this project's machine (docs/performance.md;
// Sluice's own imagenet-train does 311/s pure Go, 1,073/s with
// libjpeg-turbo: both are rows of the sensitivity table, and the default
// gives Sluice's replicas no faster decoder than the trainers' own data
// loaders); 400 samples/s per GPU is a mid-range GPU's ResNet-50 training
// rate (a T4 to a V100; the trace's nodes are mostly T4 and unnamed
// "G2"), with sigma 1.0 for the spread between lighter and heavier models.
//
// A trace task held its GPUs for its recorded duration under the static
// allocation, so its work is that duration times its static rate
// (min(trainer rate, data cores / CPU cost)); the static run reproduces
// the trace's durations, and Sluice's finishes the same samples at the
// rate its replicas allow. Tasks start when the trace scheduled them:
// finishing sooner does not start queued tasks sooner here (no scheduler
// is simulated). Tasks still running when the trace ends are simulated
// but left out of the averages. Preprocessed samples are assumed to reach
// a trainer on any node (the network is not modelled), and a replica
// serves at its full per-core rate.
//
// A task is input-bound (InputBound) when the cores its request leaves
// its data loader, less its trainer's own, preprocess fewer samples/s
// than its trainer eats at full speed (Cores - HostCores < TrainerRate x
// CPUPerSample): under static allocation its GPUs wait for data, which is
// the class of jobs GoldMiner (SIGMOD'23) and the seeds are about. How
// far static slows it (TrainerRate over its static rate) is its static
// slowdown; taking the stall away can gain it at most that. Every run
// reports JCT and GPU utilisation ratios for the input-bound tasks and
// for all (Comparison.Bound, Comparison.Summaries).
//
// The share table (Shares) asks what the ratios would be if a given
// share of the trace's tasks were input-bound. Reshare keeps every task's
// schedule, duration, GPUs, cores and CPU cost per sample, chooses the
// share of tasks to be input-bound at random (seeded by Model.Seed), and
// where a task's drawn class differs from the one chosen, sets its
// trainer rate so that its demand ratio (cores its trainer's rate needs
// over its data loader cores) is one drawn from the tasks of the chosen
// class under the same model: a reshared input-bound task is exactly as
// input-bound as the model makes the trace's own, so the table varies
// the share, not the degree (the demand model's rows of the sensitivity
// table vary that). Its work then follows from its recorded duration as
// for any trace task, so static still reproduces the trace. GoldMiner's
// 2.5x JCT and 2.1x GPU utilisation are read against the table's ratios
// over all tasks (Reached).
//
// Decide runs only for tasks whose inputs changed: a task whose last two
// rounds decided the same from the same inputs, with nothing else in its
// scale-down window, would decide the same again, so its bid is reused
// until its ready replicas or its grant change; rounds in which no task
// could decide otherwise are skipped. That keeps the whole trace to about
// a second per policy.
package trace
