package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
)

// VersityGWVersion is the versitygw release .ci/deps.sh installs.
const VersityGWVersion = "v1.8.0"

// VersityGWHint says how to get versitygw when it is missing.
const VersityGWHint = "versitygw not found in .bin/ or PATH: run `bash .ci/deps.sh` (GOBIN=<repo>/.bin go install github.com/versity/versitygw/cmd/versitygw@" + VersityGWVersion + ")"

// ErrNoVersityGW means versitygw is neither in <repo>/.bin nor in PATH.
var ErrNoVersityGW = errors.New(VersityGWHint)

// ModuleRoot walks up from the working directory to the directory holding go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// FindVersityGW looks in <root>/.bin, then PATH.
func FindVersityGW(root string) (string, error) {
	p := filepath.Join(root, ".bin", "versitygw")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", ErrNoVersityGW
}
