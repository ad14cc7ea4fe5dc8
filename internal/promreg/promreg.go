package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns the collector to use: c, or
// the equal collector registered before (prometheus.AlreadyRegisteredError),
// so building a component's metrics twice on one registry shares its
// series. A nil reg leaves c unregistered. A collector that clashes with a
// different one of the same name is a programming error: it panics with
// the name, as a test of the component shows at once.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("promreg: registering a collector: %v", err))
}
