package stepplan

// The rank policy: how the batches of one epoch become global steps, and a
// step's rows become the parts of its ranks. A DDP trainer's ranks step in
// lockstep, so every rank must take the same number of steps per epoch, and
// the samples of a step should be spread as evenly as the data allows.

// Action is what the rank layer does next with the epoch its ranks are in.
type Action int

const (
	// StepWait: the epoch has no step ready; more of it must arrive.
	StepWait Action = iota
	// StepFull: the first W ready batches, all full, form a step: batch r
	// goes to rank r.
	StepFull
	// StepTail: the epoch is cut and its remaining samples, fewer than a
	// full step, form its last step, split by tailSizes.
	StepTail
	// StepDrop: as StepTail, but drop_last: the samples are not served
	// (and are reported as dropped).
	StepDrop
	// StepEpochDone: every batch of the epoch went into a step; the ranks
	// go on to the next epoch.
	StepEpochDone
	// StepRest: the epoch is cut and its ranks are served by several
	// agents: what is left of it is planned at once (Rest).
	StepRest
)

func (a Action) String() string {
	return [...]string{"wait", "full", "tail", "drop", "epoch done", "rest"}[a]
}

// EpochSupply is what the rank layer knows of the epoch its ranks are in.
type EpochSupply struct {
	// Ready are the sizes of the epoch's ready batches, in order: full
	// (batchSize) but for the epoch's last, which is cut with the epoch.
	Ready []int
	// Pending is the number of samples of the epoch waiting in a partial
	// batch.
	Pending int
	// Cut says every chunk of the epoch arrived: no batch will follow Ready.
	Cut bool
}

// Plan is Step's decision.
type Plan struct {
	Action Action
	// Batches is how many of the ready batches the step takes (StepFull:
	// the world size; StepTail and StepDrop: all of them).
	Batches int
	// Sizes are the rows of each rank's part (StepTail only).
	Sizes []int
	// Last says the step is the last the ranks get of the epoch.
	Last bool
}

// Step decides the epoch's next global step for world ranks of
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
func Step(s EpochSupply, world, batchSize int, dropLast bool) Plan {
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
			return Plan{Action: StepFull, Batches: world, Last: last}
		}
	}
	switch {
	case !s.Cut:
		return Plan{Action: StepWait}
	case len(s.Ready) == 0:
		return Plan{Action: StepEpochDone}
	case dropLast:
		return Plan{Action: StepDrop, Batches: len(s.Ready)}
	}
	n := 0
	for _, b := range s.Ready {
		n += b
	}
	return Plan{Action: StepTail, Batches: len(s.Ready), Sizes: tailSizes(n, world), Last: true}
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
