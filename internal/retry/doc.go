// Package retry is how Sluice waits on a dependency that is not ready
// yet: a capped exponential backoff as a pure function of the attempt
// (Backoff.Delay), a loop that retries what a classifier calls transient
// with a Warn line per retry until its context ends (Do), and that
// classifier for JetStream API calls made while a NATS cluster is still
// forming (JetStream): no meta leader, no responders, a request timing
// out, too few peers for a replicated stream.
package retry
