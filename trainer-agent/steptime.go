package traineragent

// StepReport is what a rank's client sends with each batch request: totals
// since the client process started, so that a retried request counts once.
// WaitS is time the training loop spent blocked waiting for a batch;
// ComputeS is the time between handing a batch to the loop and asking for
// the next one. Steps counts the batches the loop took.
type StepReport struct {
	Rank     int
	Steps    int64
	WaitS    float64
	ComputeS float64
}

// reportStep takes a rank's report. (Seam: the step-time breakdown and the
// client-measured stall are built in steptime.go.)
func (a *Agent) reportStep(r StepReport) {}
