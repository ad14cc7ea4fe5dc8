package connect

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// maxSecretFile bounds what is read of a password or token file: a
// secret is short, and a path pointing at a large file by mistake must not
// be read whole.
const maxSecretFile = 64 << 10

// readSecretFile reads a password or token from path, without the line
// end a file usually has. Errors name the file, never its content.
func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) > maxSecretFile {
		return "", fmt.Errorf("%s is over %d bytes: not a password or token", path, maxSecretFile)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", errors.New(path + " is empty")
	}
	return v, nil
}

// fileSecret returns a function reading path at each call, for nats.go's
// handlers that run at every (re)connect: a rotated Secret is picked up.
// A read that fails keeps the last value read, so a file replaced in
// place does not drop a working connection.
func fileSecret(path string) (func() string, error) {
	last, err := readSecretFile(path)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		if v, err := readSecretFile(path); err == nil {
			last = v
		}
		return last
	}, nil
}
