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
	m    map[pipelineKey]pipeline.Pipeline
}

// pipelineKey is a pipeline as a task names it, and whether its task
// lets it defer expansions (built with Options.DeferExpansion).
type pipelineKey struct {
	name   string
	expand bool
}

// get returns the pipeline a task names; errors (an invalid spec) are not
// cached, so a replica never remembers a vocab file it could not read.
func (c *pipelineCache) get(name string, expand bool) (pipeline.Pipeline, error) {
	k := pipelineKey{name, expand}
	c.mu.Lock()
	p, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	opts := c.opts
	opts.DeferExpansion = expand
	p, err := pipeline.Lookup(name, opts)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedPipelines {
		c.m = map[pipelineKey]pipeline.Pipeline{} // simplest bound: start over
	}
	c.m[k] = p
	return p, nil
}
