package ready

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Prefix starts the ready line; the base URL follows it.
const Prefix = "SLUICE_READY "

// maxLine bounds the first line Wait reads: a child that writes without a
// newline cannot make it buffer without limit.
const maxLine = 64 << 10

// Announce prints the ready line for url on w.
func Announce(w io.Writer, url string) error {
	_, err := fmt.Fprintf(w, "%s%s\n", Prefix, url)
	return err
}

// Parse returns the URL of line if it is a ready line (its trailing
// newline and spaces ignored).
func Parse(line string) (url string, ok bool) {
	url, ok = strings.CutPrefix(line, Prefix)
	return strings.TrimSpace(url), ok
}

// Wait reads the first line of r, which must be the ready line, and returns
// its URL. The rest of r is read and discarded in the background, so the
// writer never blocks on a full pipe. If ctx ends first Wait returns its
// error; the read goes on until r ends (the caller stops the process).
func Wait(ctx context.Context, r io.Reader) (string, error) {
	type result struct {
		url string
		err error
	}
	res := make(chan result, 1)
	go func() {
		url, err := first(r)
		res <- result{url, err}
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case x := <-res:
		return x.url, x.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// first reads r's first line and parses it.
func first(r io.Reader) (string, error) {
	line, err := bufio.NewReaderSize(r, maxLine).ReadSlice('\n')
	if url, ok := Parse(string(line)); ok && err == nil {
		return url, nil
	}
	want := Prefix + "URL"
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return "", fmt.Errorf("first line over %d bytes, want %q", maxLine, want)
	case err != nil:
		return "", fmt.Errorf("first line %q (%v), want %q", line, err, want)
	}
	return "", fmt.Errorf("first line %q, want %q", line, want)
}
