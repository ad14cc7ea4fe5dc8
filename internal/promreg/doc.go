// Package promreg is the one way Sluice registers Prometheus collectors:
// Register returns the collector already registered under the same
// descriptors instead of panicking, so two components (or two controllers
// in one test process) that build the same metrics share the series.
package promreg
