package traineragent

import "github.com/sluice-project/sluice/traineragent/internal/readerstate"

// The agent's API in the types its reader's state defines (readerstate,
// the plain state below the shell): what Stats reports, and what a resume
// takes and answers.
type (
	// Stats is a reader's counters (Agent.Stats, GET /v1/stats).
	Stats = readerstate.Stats
	// State is a trainer's place in a job as its client saves it in a
	// checkpoint (Reader.Resume, POST /v1/resume).
	State = readerstate.TrainerState
	// ResumeResult is what a resume did.
	ResumeResult = readerstate.ResumeResult
)

// ErrJobEnded is readerstate.ErrJobEnded: the job was cancelled, failed
// or deleted while the agent served it.
var ErrJobEnded = readerstate.ErrJobEnded
