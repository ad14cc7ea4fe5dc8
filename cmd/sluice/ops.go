package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-project/sluice/internal/httpserve"
	"github.com/sluice-project/sluice/internal/ready"
)

// opsServer is the ops HTTP server a serving command runs (fn serve, agent,
// controller): one registry with the Go and process collectors, served at
// /metrics; the probes /healthz and /readyz; and the ready line once it
// serves. The command adds its own handlers to Mux before serve.
type opsServer struct {
	Registry *prometheus.Registry
	Mux      *http.ServeMux
	ln       net.Listener
}

// newOps returns the registry and a mux serving it at /metrics.
func newOpsServer() *opsServer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &opsServer{Registry: reg, Mux: mux}
}

// probes adds GET /healthz, "ok" while the process runs, and GET /readyz,
// answered by readyz. (fn serve's probes are its server's own: it drains.)
func (o *opsServer) probes(readyz http.HandlerFunc) {
	o.Mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	o.Mux.HandleFunc("GET /readyz", readyz)
}

// serve serves Mux on ln in the background; Serve's error comes on the
// channel.
func (o *opsServer) serve(ln net.Listener, opts httpserve.Options) (*http.Server, <-chan error) {
	o.ln = ln
	hs := httpserve.New(o.Mux, opts)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	return hs, served
}

// addr is the address served on.
func (o *opsServer) addr() string { return o.ln.Addr().String() }

// announce prints the ready line: whoever started the process reads the
// endpoint from it.
func (o *opsServer) announce(stdout io.Writer) { _ = ready.Announce(stdout, "http://"+o.addr()) }

// announceOnce prints the ready line once isReady holds (checked every
// 20ms), unless ctx ends first.
func (o *opsServer) announceOnce(ctx context.Context, stdout io.Writer, isReady func() bool) {
	for !isReady() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	o.announce(stdout)
}
