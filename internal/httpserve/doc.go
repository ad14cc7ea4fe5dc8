// Package httpserve is the one setup of the HTTP servers Sluice runs
// (`fn serve`, `sluice agent`, the controller's and the demo's ops
// endpoints): New builds the http.Server, with the token check in front
// of its handler and these bounds on what a client may hold:
//
//   - ReadHeaderTimeout: a client must send its request's headers within
//     it (a connection opened and left silent is closed);
//   - ReadTimeout: the headers and the whole body within it, so a client
//     that sends one byte of body and then nothing holds a goroutine and
//     a connection for that long, never a processing slot (fn serve reads
//     the body before it takes one). net/http lifts the read deadline once
//     the body was read to its end (it then watches the connection for a
//     hang-up instead), so a handler that runs long after reading its
//     request (a streamed shard, a GET /v1/batch that waits for the job)
//     is not cut by it;
//   - IdleTimeout: how long a kept-alive connection may wait for its next
//     request; longer than the 90s after which Go's transport (the agents
//     to the functions) drops an idle connection itself, so that the
//     client, not the server, closes it first;
//   - MaxHeaderBytes: 64 KiB of headers.
//
// No WriteTimeout by default: net/http's bounds the whole response from
// the end of the request's headers, and Sluice's responses stream for as
// long as a shard takes (fn serve bounds each frame instead,
// server.Config.FrameWriteTimeout) or wait for a batch that is not ready
// yet (the agent). Servers whose answers are small and at once (the ops
// endpoints) set one.
//
// Public names what stays open without a token: liveness, readiness and
// metrics. They reveal that the process runs, whether it is ready (a
// reason such as "draining" or "nats disconnected"), and counters, gauges
// and histograms labelled with job IDs, reader names, ranks and outcomes:
// no sample, no key, no URL, no credential. Probes (kubelet, Knative's
// queue-proxy) and Prometheus can then work without the token.
package httpserve
