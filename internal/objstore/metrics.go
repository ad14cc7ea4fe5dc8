package objstore

import (
	"context"
	"sync/atomic"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
)

// metrics counts S3 requests (one per API call, whatever its attempts)
// and retries (attempts after a call's first), by operation.
type metrics struct {
	requests *prometheus.CounterVec
	retries  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_s3_requests_total",
			Help: "S3 API calls by operation and outcome (ok, error), each counted once whatever its retries.",
		}, []string{"operation", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_s3_retries_total",
			Help: "S3 attempts that retried a failed one (throttling, 5xx, broken connections), by operation.",
		}, []string{"operation"}),
	}
	m.requests = promreg.Register(reg, m.requests)
	m.retries = promreg.Register(reg, m.retries)
	return m
}

type attemptsKey struct{}

// addTo puts two middlewares on a client's stack: one around the whole
// call (counts the request and its outcome) and one after the SDK's retry
// middleware, which runs once per attempt.
func (m *metrics) addTo(stack *middleware.Stack) error {
	call := middleware.InitializeMiddlewareFunc("SluiceS3Requests", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		ctx = context.WithValue(ctx, attemptsKey{}, new(atomic.Int32))
		out, md, err := next.HandleInitialize(ctx, in)
		outcome := "ok"
		if err != nil {
			outcome = "error"
		}
		m.requests.WithLabelValues(awsmiddleware.GetOperationName(ctx), outcome).Inc()
		return out, md, err
	})
	if err := stack.Initialize.Add(call, middleware.After); err != nil {
		return err
	}
	attempt := middleware.FinalizeMiddlewareFunc("SluiceS3Attempts", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		if n, ok := ctx.Value(attemptsKey{}).(*atomic.Int32); ok && n.Add(1) > 1 {
			m.retries.WithLabelValues(awsmiddleware.GetOperationName(ctx)).Inc()
		}
		return next.HandleFinalize(ctx, in)
	})
	if _, ok := stack.Finalize.Get("Retry"); ok {
		return stack.Finalize.Insert(attempt, "Retry", middleware.After)
	}
	return stack.Finalize.Add(attempt, middleware.After)
}
