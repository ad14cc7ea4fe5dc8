// Package cluster is `sluice loadtest cluster`: bursty hyperparameter
// sweeps on a GPU cluster of the size a platform team runs (by default 64
// nodes of 8 GPUs, 50 sweeps of 8-16 trials arriving over an hour, half
// of them in bursts, trials of 5-30 minutes), simulated on virtual time by
// the trace simulator (package trace) under every scaling policy on the
// same arrivals, and judged by what the cluster pays: the preprocessing
// core-hours it reserved (replicas, serving or starting, times their
// cores; a static data loader's requested cores while its trial runs)
// beside the GPU-hours trainers stalled and the completion times.
//
// One machine cannot tell the policies apart (every policy does the same
// fixed work on its two cores); a cluster can, and the simulator is
// calibrated against the one-machine load test (loadtest/sweep).
//
// Scenario draws the sweeps from a seed (Draw): sweep arrivals are a
// Poisson process plus bursts, a sweep's trials start within seconds of
// each other, and each sweep draws one trainer rate and one preprocessing
// cost (one model, one input pipeline). Shared sweeps are one job with a
// reader per trial; independent trials are one job each. Trials wait for
// GPUs first come, first served.
package cluster
