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

func TestWithVocabDirPassesTheDirectory(t *testing.T) {
	base := FnServe([]string{"sluice", "fn", "serve"}, 1, 1, connect.Default())
	if got := base.WithVocabDir(""); strings.Join(got.Command, " ") != strings.Join(base.Command, " ") {
		t.Errorf("no directory: command %q, want %q", got.Command, base.Command)
	}
	got := base.WithVocabDir("/srv/vocab")
	if cmd := strings.Join(got.Command, " "); !strings.HasSuffix(cmd, " --vocab-dir /srv/vocab") {
		t.Errorf("command %q lacks --vocab-dir /srv/vocab", cmd)
	}
	if len(base.Command) == len(got.Command) {
		t.Error("WithVocabDir changed its receiver's command")
	}
}
