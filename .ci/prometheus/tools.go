//go:build tools

// Package tools pins Prometheus v0.316.0: its server and promtool, for the
// tests of deploy/observability (build.sh).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
