package integration

import (
	"context"
	"testing"
)

// natsBytesTarget is the most bytes nats-server may move (in plus out)
// per byte of batches delivered to trainers: only tasks, positions, job
// records, plans, results and signals pass through NATS, never output.
const natsBytesTarget = 0.02

// NATSBytes measures what nats-server moved while a scenario's trainers
// read: /varz before and after, against the bytes the trainers received.
type NATSBytes struct {
	srv    *NATSServer
	before Varz
}

// MeasureNATSBytes reads the server's counts now. The server must not
// restart before Check (its counts would start again).
func (c *Cluster) MeasureNATSBytes() *NATSBytes {
	c.T.Helper()
	v, err := c.NATS.Varz(context.Background())
	if err != nil {
		c.T.Fatal(err)
	}
	return &NATSBytes{srv: c.NATS, before: v}
}

// Check reads the counts again, logs the figures line of scenario
// ("scenario=... nats_in_bytes=... nats_out_bytes=... nats_msgs=...
// delivered_bytes=... nats_bytes_per_delivered_byte=... target=...") and
// fails t if the ratio is over natsBytesTarget. delivered is the bytes of
// the batches the trainers received.
func (m *NATSBytes) Check(t *testing.T, scenario string, delivered int64) float64 {
	t.Helper()
	after, err := m.srv.Varz(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := m.before.Sub(after)
	if delivered <= 0 {
		t.Fatalf("%s: no bytes delivered to measure NATS traffic against", scenario)
	}
	ratio := float64(d.InBytes+d.OutBytes) / float64(delivered)
	t.Logf("scenario=%s nats_in_bytes=%d nats_out_bytes=%d nats_msgs=%d delivered_bytes=%d nats_bytes_per_delivered_byte=%.5f target=%.2f",
		scenario, d.InBytes, d.OutBytes, d.InMsgs+d.OutMsgs, delivered, ratio, natsBytesTarget)
	if ratio > natsBytesTarget {
		t.Errorf("%s: nats-server moved %d bytes (%d in, %d out) for %d bytes delivered to trainers: %.4f per byte, over the target %.2f",
			scenario, d.InBytes+d.OutBytes, d.InBytes, d.OutBytes, delivered, ratio, natsBytesTarget)
	}
	return ratio
}
