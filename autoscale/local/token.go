package local

import (
	"slices"

	"github.com/sluice-project/sluice/internal/bearer"
)

// WithToken gives every replica tok as the function token it requires
// (bearer.Function), through its environment, never its command line,
// where every local user could read it. A zero tok changes nothing: the
// replicas listen on loopback and need none.
func (o Options) WithToken(tok bearer.Token) Options {
	if !tok.IsSet() {
		return o
	}
	// A token file named in this process's environment would take
	// precedence over the value in the replica: unset it there.
	o.Env = append(slices.Clone(o.Env), bearer.Function.FileEnv()+"=", tok.Env(bearer.Function.Env))
	return o
}
