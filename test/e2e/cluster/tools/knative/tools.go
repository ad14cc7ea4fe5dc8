//go:build tools

// Package tools pins Knative Serving v0.42.2's core (controller, webhook,
// activator, autoscaler, queue-proxy), which the real-cluster tests build from
// the Go module proxy.
package tools

import (
	_ "knative.dev/serving/cmd/activator"
	_ "knative.dev/serving/cmd/autoscaler"
	_ "knative.dev/serving/cmd/controller"
	_ "knative.dev/serving/cmd/queue"
	_ "knative.dev/serving/cmd/webhook"
)
