package local

import (
	"strconv"

	"github.com/sluice-project/sluice/internal/connect"
)

// FnServe is how a controller runs its replicas on this machine: command
// (the sluice binary and "fn", "serve") on a loopback port, with cpus cores
// (GOMAXPROCS) and concurrency shards at once, reaching NATS and S3 as conn
// says (settings as flags, secrets only in the environment). `sluice
// controller` and `sluice demo` both build their actuator with it.
func FnServe(command []string, cpus, concurrency int, conn connect.Config) Options {
	parts := connect.PartNATS | connect.PartS3
	argv := append([]string{}, command...)
	argv = append(argv, "--listen", "127.0.0.1:0", "--cpus", strconv.Itoa(cpus),
		"--concurrency", strconv.Itoa(concurrency), "--log-level", "warn")
	return Options{Command: append(argv, conn.Args(parts)...), Env: conn.Env(parts)}
}
