// Command stack is the part of Sluice's run in bench/peers that a
// deployment already has: NATS JetStream and an S3 endpoint, both on
// loopback, in this one process (the embedded defaults `sluice demo` runs
// on). It uploads the shards of --shards to s3://BUCKET/PREFIX/, prints
// one JSON line with the URLs, and serves until stdin closes or SIGTERM.
// The harness starts `sluice job submit`, `sluice controller` and `sluice
// agent` against it as separate processes, and counts this process's CPU
// and memory as part of Sluice's.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/synth"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "stack: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	shardDir := flag.String("shards", "", "directory whose *.tar, *.jsonl files are uploaded")
	bucket := flag.String("bucket", "peers", "bucket")
	prefix := flag.String("prefix", "data/", "object prefix (ends in /)")
	dataDir := flag.String("data-dir", "", "JetStream store (default: a temporary one)")
	flag.Parse()
	if *shardDir == "" {
		return errors.New("--shards is required")
	}
	var shards []synth.Shard
	names, err := os.ReadDir(*shardDir)
	if err != nil {
		return err
	}
	for _, e := range names {
		n := e.Name()
		if !strings.HasSuffix(n, ".tar") && !strings.HasSuffix(n, ".jsonl") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(*shardDir, n))
		if err != nil {
			return err
		}
		shards = append(shards, synth.Shard{Name: n, Data: b})
	}
	if len(shards) == 0 {
		return fmt.Errorf("no shards in %s", *shardDir)
	}
	sort.Slice(shards, func(i, j int) bool { return shards[i].Name < shards[j].Name })

	// No NATS authorization: the peers run unauthenticated on loopback too,
	// and the agent's job login would only add a callout round trip.
	nsrv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: *dataDir})
	if err != nil {
		return err
	}
	defer nsrv.Shutdown()
	s3srv, err := embedded.StartS3("")
	if err != nil {
		return err
	}
	defer s3srv.Close()
	ctx := context.Background()
	c, err := objstore.NewClient(ctx, objstore.Config{Endpoint: s3srv.Endpoint(), PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("peers", "peers-secret", "")}, nil)
	if err != nil {
		return err
	}
	if err := synth.Upload(ctx, c, *bucket, *prefix, shards); err != nil {
		return err
	}
	line, _ := json.Marshal(map[string]any{"nats_url": nsrv.URL(), "s3_endpoint": s3srv.Endpoint(),
		"dataset": "s3://" + *bucket + "/" + *prefix, "shards": len(shards)})
	fmt.Println(string(line))

	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-done:
	case <-sig:
	}
	return nil
}
