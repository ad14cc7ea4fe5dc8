//go:build !cgo

package demand

import (
	"errors"
	"log/slog"
)

// OpenNVML needs cgo; this build has none, so there is no GPU reading.
func OpenNVML(logger *slog.Logger) (GPUSampler, func(), error) {
	return nil, nil, errors.New("reading gpu utilisation needs nvml, and this binary was built without cgo")
}
