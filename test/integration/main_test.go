package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
)

// binDir holds this run's sluice binary; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-itest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	binsOnce sync.Once
	bins     Binaries
	binsErr  error
)

// binaries builds sluice and nats-server once per test run, on the first
// scenario that needs them, and finds versitygw. Without versitygw the
// scenario fails on CI and is skipped elsewhere.
func binaries(t *testing.T) Binaries {
	t.Helper()
	if testing.Short() {
		t.Skip("integration scenario: skipped with -short")
	}
	binsOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		root, err := testenv.ModuleRoot()
		if err != nil {
			binsErr = err
			return
		}
		if bins.VersityGW, binsErr = testenv.FindVersityGW(root); binsErr != nil {
			return
		}
		if bins.NATSServer, binsErr = NATSServerBinary(ctx, root); binsErr != nil {
			return
		}
		bins.Sluice, binsErr = BuildSluice(ctx, root, binDir)
	})
	if errors.Is(binsErr, testenv.ErrNoVersityGW) && os.Getenv("CI") != "true" {
		t.Skip(binsErr)
	}
	if binsErr != nil {
		t.Fatal(binsErr)
	}
	return bins
}

// logReport logs a scenario's figures line and fails the test if any
// sample was lost, duplicated or unexpected.
func logReport(t *testing.T, r Report) {
	t.Helper()
	t.Log(r.Line())
	if err := r.Err(); err != nil {
		t.Error(err)
	}
}
