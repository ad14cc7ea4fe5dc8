package local

import (
	"strconv"

	"github.com/sluice-project/sluice/internal/connect"
)

// FnServe is how a controller runs its replicas on this machine: command
// (the sluice binary and "fn", "serve") on a loopback port, with cpus cores
// (GOMAXPROCS) and concurrency shards at once, reaching S3 as conn says
// (settings as flags, secrets only in the environment): a replica needs
// nothing else, its output goes back in the response to each task. `sluice
// controller` and `sluice demo` both build their actuator with it.
func FnServe(command []string, cpus, concurrency int, conn connect.Config) Options {
	argv := append([]string{}, command...)
	argv = append(argv, "--listen", "127.0.0.1:0", "--cpus", strconv.Itoa(cpus),
		"--concurrency", strconv.Itoa(concurrency), "--log-level", "warn")
	return Options{Command: append(argv, conn.Args(connect.PartS3)...), Env: conn.Env(connect.PartS3)}
}

// WithVocabDir lets the replicas read vocab and tokenizer files from dir (fn
// serve --vocab-dir); "" leaves them to builtin. Options without a
// Command are returned as they are.
func (o Options) WithVocabDir(dir string) Options {
	if len(o.Command) == 0 || dir == "" {
		return o
	}
	o.Command = append(append([]string{}, o.Command...), "--vocab-dir", dir)
	return o
}
