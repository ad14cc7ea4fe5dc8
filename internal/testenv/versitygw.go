package testenv

import (
	"context"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Versitygw starts a versitygw process (a real S3 gateway over a
// directory, which checks request signatures, unlike gofakes3) with the
// given keys on loopback and returns its endpoint. Where versitygw is not
// installed (.ci/deps.sh puts it in <repo>/.bin) the test fails under CI
// (CI=true) and is skipped elsewhere, saying how to install it.
func Versitygw(t testing.TB, accessKey, secretKey string) string {
	t.Helper()
	bin, err := findVersityGW()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // versitygw takes a port, not a listener
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--access", accessKey, "--secret", secretKey, "--port", addr, "posix", t.TempDir())
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
	return "http://" + addr
}

// findVersityGW looks in <repo>/.bin, then PATH, then $GOPATH/bin.
func findVersityGW() (string, error) {
	if root, err := ModuleRoot(); err == nil {
		if bin, err := FindVersityGW(root); err == nil {
			return bin, nil
		}
	}
	bin := filepath.Join(build.Default.GOPATH, "bin", "versitygw")
	if _, err := os.Stat(bin); err != nil {
		return "", ErrNoVersityGW
	}
	return bin, nil
}
