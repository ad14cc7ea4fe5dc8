// Package readerstate is a reader's plain state, the floor between its
// batch assembly (assembly) and the agent's shell (traineragent): State
// holds the assembler, the ready batches, the rank layer (stepper.go), the
// step policy (a lone agent's, or the planner's TeamState: the team's
// holders and members), the plan of the rest of a cut epoch, the book of
// the generations of ranks a resume starts (generation.go; rewind.go is
// the resume's rewind), the stall window and the counters Stats reports.
// It has no lock and does no I/O: the shell holds its lock around every
// call and does the NATS, KV and HTTP work; times come in as arguments;
// what the shell must do comes back as values (Changed, TakeEvents, the
// counters).
package readerstate
