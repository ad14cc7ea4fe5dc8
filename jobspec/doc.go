// Package jobspec reads and checks job and sweep specs: the one package
// outside functions/ that imports functions/pipeline, so that a job's
// pipeline is checked as a replica will build it before the job is
// submitted, while the broker, the controller and the agent link no image,
// text or tabular code.
//
// Parse reads a job spec file (YAML or JSON, at most MaxFileBytes, without
// aliases) and Check checks a spec built in Go; both report every problem
// at once as an *Error (matching ErrInvalid), a file's each at its line,
// a pipeline problem at its line in the inline pipeline document.
// ParseWith applies command-line flags over the file before the check.
// ParseSweep reads a sweep file and checks the sweep and each job it
// makes.
//
// The programs that submit jobs give Check to their broker
// (broker.Broker.WithSpecCheck). The controller's re-check of a job record
// (broker.CheckRecord) builds no pipeline: the functions refuse one that
// does not build.
package jobspec
