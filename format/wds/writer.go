package wds

import (
	"archive/tar"
	"fmt"
	"io"
	"sort"
	"time"
)

// Writer writes samples as consecutive tar members, extensions in sorted
// order so a shard's bytes depend only on its samples.
type Writer struct {
	tw *tar.Writer
}

// NewWriter writes a tar stream to w; Close finishes it.
func NewWriter(w io.Writer) *Writer { return &Writer{tw: tar.NewWriter(w)} }

// epoch0 keeps shard bytes reproducible (no wall-clock mtimes).
var epoch0 = time.Unix(0, 0)

// Write adds one sample.
func (w *Writer) Write(s Sample) error {
	exts := make([]string, 0, len(s.Files))
	for e := range s.Files {
		exts = append(exts, e)
	}
	sort.Strings(exts)
	for _, e := range exts {
		data := s.Files[e]
		name := s.Key + "." + e
		if err := w.tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch0, Typeflag: tar.TypeReg}); err != nil {
			return fmt.Errorf("writing tar header %s: %w", name, err)
		}
		if _, err := w.tw.Write(data); err != nil {
			return fmt.Errorf("writing tar member %s: %w", name, err)
		}
	}
	return nil
}

// Close writes the tar trailer.
func (w *Writer) Close() error { return w.tw.Close() }
