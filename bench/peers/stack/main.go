// Command stack is the part of Sluice's run in bench/peers that a
// deployment already has: NATS JetStream and an S3 endpoint, both on
// loopback, in this one process (the embedded defaults `sluice demo` runs
// on). It uploads the shards of --shards to s3://BUCKET/PREFIX/, prints
// one JSON line with the URLs, and serves until stdin closes or SIGTERM.
// With --s3-dir the S3 store is that directory, uploaded to once (--prepare
// does only that, before any timed run): a deployment's dataset is in S3
// before its job starts, as the peers' files are on disk.
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
	s3Dir := flag.String("s3-dir", "", "keep the S3 store in this directory, uploaded to once (default: in memory, uploaded at every start)")
	prepare := flag.Bool("prepare", false, "with --s3-dir: upload the shards if they are not there yet, and exit")
	flag.Parse()
	if *shardDir == "" {
		return errors.New("--shards is required")
	}
	if *prepare && *s3Dir == "" {
		return errors.New("--prepare needs --s3-dir")
	}
	names, err := os.ReadDir(*shardDir)
	if err != nil {
		return err
	}
	var listing []string // name and size of each shard, sorted
	for _, e := range names {
		n := e.Name()
		if !strings.HasSuffix(n, ".tar") && !strings.HasSuffix(n, ".jsonl") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		listing = append(listing, fmt.Sprintf("%s %d", n, fi.Size()))
	}
	if len(listing) == 0 {
		return fmt.Errorf("no shards in %s", *shardDir)
	}
	sort.Strings(listing)
	marker := filepath.Join(*s3Dir, "uploaded")
	upload := true
	if *s3Dir != "" {
		if b, err := os.ReadFile(marker); err == nil && string(b) == strings.Join(listing, "\n") {
			upload = false
		} else if err := os.RemoveAll(*s3Dir); err != nil {
			return err
		}
	}

	// No NATS authorization: the peers run unauthenticated on loopback too,
	// and the agent's job login would only add a callout round trip.
	var s3srv *embedded.S3
	if *s3Dir != "" {
		s3srv, err = embedded.StartS3Dir("", *s3Dir)
	} else {
		s3srv, err = embedded.StartS3("")
	}
	if err != nil {
		return err
	}
	defer s3srv.Close()
	if upload {
		if err := uploadShards(s3srv, *shardDir, listing, *bucket, *prefix); err != nil {
			return err
		}
		if *s3Dir != "" {
			if err := os.WriteFile(marker, []byte(strings.Join(listing, "\n")), 0o644); err != nil {
				return err
			}
		}
	}
	if *prepare {
		return nil
	}
	nsrv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: *dataDir})
	if err != nil {
		return err
	}
	defer nsrv.Shutdown()
	line, _ := json.Marshal(map[string]any{"nats_url": nsrv.URL(), "s3_endpoint": s3srv.Endpoint(),
		"dataset": "s3://" + *bucket + "/" + *prefix, "shards": len(listing)})
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

// uploadShards puts the shards listing names (each "NAME SIZE") from dir.
func uploadShards(s3srv *embedded.S3, dir string, listing []string, bucket, prefix string) error {
	shards := make([]synth.Shard, len(listing))
	for i, l := range listing {
		name, _, _ := strings.Cut(l, " ")
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		shards[i] = synth.Shard{Name: name, Data: b}
	}
	ctx := context.Background()
	c, err := objstore.NewClient(ctx, objstore.Config{Endpoint: s3srv.Endpoint(), PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("peers", "peers-secret", "")}, nil)
	if err != nil {
		return err
	}
	return synth.Upload(ctx, c, bucket, prefix, shards)
}
