package local

import (
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/connect"
)

// TestFnServeGivesReplicasS3Only: a replica answers tasks with their
// output and needs S3 alone; the controller's NATS settings, its secrets
// above all, never reach it.
func TestFnServeGivesReplicasS3Only(t *testing.T) {
	conn := connect.Default()
	conn.NATS.Token = "nats-secret"
	conn.NATS.User = "nats-user"
	conn.S3.Endpoint = "http://127.0.0.1:9000"
	conn.S3.PathStyle = true
	o := FnServe([]string{"sluice", "fn", "serve"}, 2, 1, conn)
	cmd := strings.Join(o.Command, " ")
	if !strings.Contains(cmd, "--s3-endpoint=http://127.0.0.1:9000") || !strings.Contains(cmd, "--concurrency 1") {
		t.Errorf("replica command %q lacks the S3 endpoint or the concurrency", cmd)
	}
	for _, s := range append(o.Command, o.Env...) {
		if strings.Contains(strings.ToLower(s), "nats") {
			t.Errorf("replica command or environment has %q", s)
		}
	}
}
