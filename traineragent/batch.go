package traineragent

import "github.com/sluice-project/sluice/traineragent/internal/assembly"

// Batch is one rank's batch as a trainer gets it (Agent.Next, or the
// safetensors file GET /v1/batch sends: Batch.Encode). Its assembly lives
// below the agent, in assembly.
type Batch = assembly.Batch

// DecodeBatch reads a batch written by Batch.Encode; tensors alias data and
// come sorted by name.
func DecodeBatch(data []byte) (Batch, error) { return assembly.DecodeBatch(data) }
