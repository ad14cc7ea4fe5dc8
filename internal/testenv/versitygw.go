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
// given keys on loopback and returns its endpoint. It skips the test when
// versitygw is not installed (`go install
// github.com/versity/versitygw/cmd/versitygw@v1.8.0`).
func Versitygw(t testing.TB, accessKey, secretKey string) string {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		bin = filepath.Join(build.Default.GOPATH, "bin", "versitygw")
		if _, err := os.Stat(bin); err != nil {
			t.Skip("versitygw not installed")
		}
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
