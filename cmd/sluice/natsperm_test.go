package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// TestCommandsRunAsTheirLeastPrivilegeUsers runs the commands against a
// nats-server started from the shipped configuration, each as its own
// user with its password in a file: `job submit` as the cli, `sluice
// controller` as a process as its own, answering the auth callout, and
// `sluice agent` as a process connected as its job with the team key
// `job submit` wrote. The job runs to
// its end with no permissions violation; `job delete` is refused to the
// cli, saying why, and done by the admin.
func TestCommandsRunAsTheirLeastPrivilegeUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	as := map[string][]string{}
	for _, r := range natsperm.Roles() {
		pw := "pw-" + r.Name + "-S3cret"
		t.Setenv(r.PasswordEnv(), pw) // the server's
		file := filepath.Join(dir, r.Name)
		if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		as[r.Name] = []string{"--nats-user", r.User(), "--nats-password-file", file}
	}
	// The auth callout's issuer: its public key for the server, its seed
	// in a file for the controller.
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := issuer.PublicKey()
	seed, _ := issuer.Seed()
	seedFile := filepath.Join(dir, "callout.seed")
	if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(natsperm.CalloutIssuerEnv, pub)
	t.Setenv("POD_NAME", "sluice-nats-0")
	srv := testenv.NATSFromConfig(t, "../../deploy/knative/nats/nats.conf")

	ctx := context.Background()
	s3c, s3cfg := testenv.S3(t, "")
	s3TestEnv(t, testenv.S3AccessKey, testenv.S3SecretKey)
	imgs, err := synth.Images(synth.ImageOptions{Samples: 8, Shards: 4, Seed: 1, MinSide: 24, MaxSide: 40, Quality: 60, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "ds/", imgs); err != nil {
		t.Fatal(err)
	}
	e := controllerEnv{natsURL: srv.ClientURL(), s3Endpoint: s3cfg.Endpoint}
	nats := []string{"--nats", e.natsURL}

	startControllerProcess(t, e, "perm", append(as["controller"], "--nats-callout-seed-file", seedFile)...)
	job := func(who string, args ...string) (int, string, string) {
		return runCLI(t, append(append(append([]string{"job"}, args...), nats...), as[who]...)...)
	}
	code, _, stderr := runCLI(t, append(append([]string{"job", "submit", "--id", "perm", "--dataset", "s3://data/ds/",
		"--pipeline", "imagenet-eval", "--epochs", "1", "--batch-size", "4", "--s3-endpoint", e.s3Endpoint}, nats...), as["cli"]...)...)
	if code != 0 {
		t.Fatalf("job submit as the cli: %d %s", code, stderr)
	}
	// An agent still configured as the user agents shared is told what
	// changed.
	code, _, stderr = runCLI(t, append([]string{"agent", "--job", "perm", "--listen", "127.0.0.1:0", "--nats-user", "sluice-agent", "--nats-password", "pw"}, nats...)...)
	if code == 0 || !strings.Contains(stderr, "sluice-agent, which agents shared, is gone") {
		t.Errorf("agent as sluice-agent: exit %d, stderr %q; want refused, saying why", code, stderr)
	}
	// The agent connects as its job, with the team key job submit wrote.
	_, url := startAgent(t, append([]string{"--job", "perm"}, nats...)...)
	got := map[string]bool{}
	getBatches(t, url, got, -1)
	if len(got) != 8 {
		t.Errorf("the agent delivered %d samples, want 8", len(got))
	}
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		code, out, stderr := job("cli", "status", "perm")
		if code != 0 || !strings.Contains(out, "succeeded") {
			return fmt.Errorf("job status as the cli: %d %s %s", code, out, stderr)
		}
		return nil
	})
	if v := srv.Violations(); len(v) > 0 {
		t.Errorf("permissions violations:\n%s", strings.Join(v, "\n"))
	}

	code, _, stderr = job("cli", "delete", "perm")
	if code == 0 || !strings.Contains(stderr, "Permissions Violation for Publish to") || !strings.Contains(stderr, "$KV."+wire.ReadersBucket+"."+wire.ReaderKey("perm", wire.DefaultReader)) {
		t.Errorf("job delete as the cli: exit %d, stderr %q; want refused, naming the violation", code, stderr)
	}
	if strings.Contains(stderr, "S3cret") {
		t.Errorf("stderr shows a password: %s", stderr)
	}
	if code, _, stderr := job("admin", "delete", "perm"); code != 0 {
		t.Errorf("job delete as the admin: %d %s", code, stderr)
	}
}
