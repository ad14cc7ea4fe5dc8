// Package stepplan holds the pure rank policies of a reader: how one
// epoch's batches become global steps (Step, for a lone agent), and how
// the batches and rows that several agents of a team hold do (TeamStep,
// Rest). It is the bottom floor of traineragent: plain values in and out,
// no state, no I/O.
package stepplan
