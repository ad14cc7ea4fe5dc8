// Command genimages writes the ImageNet-like JPEGs that bench/compare.sh
// feeds to both torchvision and `sluice bench ops`: synth's seeded
// images (300-800 px sides, quality 90), as plain files (NNNNNNNN.jpg with
// its NNNNNNNN.cls label) and as one WebDataset tar shard of the same bytes.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/synth"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "genimages: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("genimages", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write NNNNNNNN.jpg/.cls files into (created)")
	tarPath := fs.String("tar", "", "also write the samples as this WebDataset tar shard")
	n := fs.Int("samples", 400, "number of images")
	seed := fs.Uint64("seed", 1, "generator seed")
	minSide := fs.Int("min-side", 300, "smallest image side (px)")
	maxSide := fs.Int("max-side", 800, "largest image side (px)")
	quality := fs.Int("quality", 90, "JPEG quality")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out is required")
	}
	shards, err := synth.Images(synth.ImageOptions{Samples: *n, Shards: 1, Seed: *seed,
		MinSide: *minSide, MaxSide: *maxSide, Quality: *quality, Classes: 1000})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	r := wds.NewReader(bytes.NewReader(shards[0].Data), 0)
	var files, size int
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		for ext, b := range s.Files {
			if err := os.WriteFile(filepath.Join(*out, s.Key+"."+ext), b, 0o644); err != nil {
				return err
			}
			if ext == "jpg" {
				files++
				size += len(b)
			}
		}
	}
	if *tarPath != "" {
		if err := os.WriteFile(*tarPath, shards[0].Data, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %d jpegs (%d KiB on average) to %s\n", files, size/max(files, 1)/1024, *out)
	return nil
}
