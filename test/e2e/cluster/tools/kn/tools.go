//go:build tools

// Package tools pins the kn CLI (Knative client v0.42, the release that
// matches Knative Serving v0.42), which the real-cluster tests deploy the
// function with, as users do.
package tools

import _ "knative.dev/client/cmd/kn"
