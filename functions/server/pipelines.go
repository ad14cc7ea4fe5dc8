package server

import (
	"sync"

	"github.com/sluice-project/sluice/functions/pipeline"
)

// maxCachedPipelines bounds the cache: jobs name few pipelines, but each
// task may carry a whole spec document, and a replica must not grow
// without bound on distinct ones.
const maxCachedPipelines = 64

// pipelineCache builds each distinct pipeline once per replica. Building
// validates the spec and may read a vocab file, and a built pipeline pools
// its image buffers across calls: rebuilding it per shard would redo the
// first and throw away the second. Pipelines are safe for concurrent use.
type pipelineCache struct {
	opts pipeline.Options
	mu   sync.Mutex
	m    map[string]pipeline.Pipeline
}

// get returns the pipeline a task names; errors (an invalid spec) are not
// cached, so a replica never remembers a vocab file it could not read.
func (c *pipelineCache) get(name string) (pipeline.Pipeline, error) {
	c.mu.Lock()
	p, ok := c.m[name]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := pipeline.Lookup(name, c.opts)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedPipelines {
		c.m = map[string]pipeline.Pipeline{} // simplest bound: start over
	}
	c.m[name] = p
	return p, nil
}
