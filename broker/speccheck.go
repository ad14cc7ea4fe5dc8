package broker

import "github.com/sluice-project/sluice/wire"

// SpecCheck returns every problem of a job spec (defaults applied) as one
// error, or nil. jobspec.Check is the full one: the fields and the
// pipeline, built as a replica would build it. It is given to the broker
// (WithSpecCheck) by the programs that submit jobs, so that the broker,
// and the agent and controller that import it, link no function code.
type SpecCheck func(wire.JobSpec) error

// WithSpecCheck makes Submit and SubmitSweep check each job spec with
// check (jobspec.Check) and returns b; call it before b is used. Without
// it they check the spec's fields only (wire.JobSpec.Validate), as
// CheckRecord does, and a pipeline that does not build is refused by the
// functions instead.
func (b *Broker) WithSpecCheck(check SpecCheck) *Broker {
	b.check = check
	return b
}

// checkSpec checks spec with the broker's SpecCheck.
func (b *Broker) checkSpec(spec wire.JobSpec) error {
	if b.check == nil {
		return spec.Validate()
	}
	return b.check(spec)
}
