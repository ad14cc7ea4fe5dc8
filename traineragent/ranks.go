package traineragent

// The rank policy: how the batches of one epoch become global steps, and a
// step's rows become the parts of its ranks. A DDP trainer's ranks step in
// lockstep, so every rank must take the same number of steps per epoch, and
// the samples of a step should be spread as evenly as the data allows.

// stepAction is what the rank layer does next with the epoch its ranks are in.
type stepAction int

const (
	// stepWait: the epoch has no step ready; more of it must arrive.
	stepWait stepAction = iota
	// stepFull: the first W ready batches, all full, form a step: batch r
	// goes to rank r.
	stepFull
	// stepTail: the epoch is cut and its remaining samples, fewer than a
	// full step, form its last step, split by tailSizes.
	stepTail
	// stepDrop: as stepTail, but drop_last: the samples are not served
	// (and are reported as dropped).
	stepDrop
	// stepEpochDone: every batch of the epoch went into a step; the ranks
	// go on to the next epoch.
	stepEpochDone
	// stepRest: the epoch is cut and its ranks are served by several
	// agents: what is left of it is planned at once (planRest).
	stepRest
)

func (a stepAction) String() string {
	return [...]string{"wait", "full", "tail", "drop", "epoch done", "rest"}[a]
}

// epochSupply is what the rank layer knows of the epoch its ranks are in.
type epochSupply struct {
	// Ready are the sizes of the epoch's ready batches, in order: full
	// (batchSize) but for the epoch's last, which is cut with the epoch.
	Ready []int
	// Pending is the number of samples of the epoch waiting in a partial
	// batch.
	Pending int
	// Cut says every chunk of the epoch arrived: no batch will follow Ready.
	Cut bool
}

// stepPlan is planStep's decision.
type stepPlan struct {
	Action stepAction
	// Batches is how many of the ready batches the step takes (stepFull:
	// the world size; stepTail and stepDrop: all of them).
	Batches int
	// Sizes are the rows of each rank's part (stepTail only).
	Sizes []int
	// Last says the step is the last the ranks get of the epoch.
	Last bool
}

// planStep decides the epoch's next global step for world ranks of
// batchSize samples each.
//
// A full step needs world full batches. Until the epoch is cut, it is
// formed only if another step is known to follow (another ready batch or
// pending samples; with dropLast, a full step's worth of them), so that a
// step is marked Last exactly when it is:
// the epoch's last chunk may arrive before its shard end. Once the epoch is
// cut and fewer than world full batches remain (n samples), those form the
// last step, split so that sizes differ by at most one (some ranks may get
// no rows), or with dropLast are dropped.
func planStep(s epochSupply, world, batchSize int, dropLast bool) stepPlan {
	full := 0
	for _, n := range s.Ready {
		if n != batchSize {
			break
		}
		full++
	}
	if full >= world {
		// After this step, is there another one for the ranks? Any sample
		// left makes one (the tail); with drop_last only a full step's
		// worth does.
		rest := s.Ready[world:]
		restFull := full - world
		more := len(rest) > 0 || s.Pending > 0
		if dropLast {
			n := s.Pending
			for _, k := range rest {
				n += k
			}
			more = n >= world*batchSize
		}
		if more || s.Cut {
			last := s.Cut && (len(rest) == 0 || restFull < world && dropLast)
			return stepPlan{Action: stepFull, Batches: world, Last: last}
		}
	}
	switch {
	case !s.Cut:
		return stepPlan{Action: stepWait}
	case len(s.Ready) == 0:
		return stepPlan{Action: stepEpochDone}
	case dropLast:
		return stepPlan{Action: stepDrop, Batches: len(s.Ready)}
	}
	n := 0
	for _, b := range s.Ready {
		n += b
	}
	return stepPlan{Action: stepTail, Batches: len(s.Ready), Sizes: tailSizes(n, world), Last: true}
}

// tailSizes splits n samples over world ranks: sizes differ by at most
// one, ranks below n mod world get the larger.
func tailSizes(n, world int) []int {
	sizes := make([]int, world)
	for r := range sizes {
		sizes[r] = n / world
		if r < n%world {
			sizes[r]++
		}
	}
	return sizes
}
