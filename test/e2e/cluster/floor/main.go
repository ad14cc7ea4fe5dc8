// Command floor is the real cluster's minimal Knative Service: an HTTP
// server that answers every request at once, in a static binary packed
// FROM scratch as Sluice's image is. Its cold start through the activator
// is Knative's own floor on the cluster, which the cold-start scenario
// (test/e2e) sets Sluice's against.
package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	port := os.Getenv("PORT") // Knative's
	if port == "" {
		port = "8080"
	}
	srv := &http.Server{Addr: ":" + port, ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		os.Stderr.WriteString("floor: " + err.Error() + "\n")
		os.Exit(1)
	}
}
