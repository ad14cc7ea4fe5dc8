package embedded

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/spf13/afero"
)

// S3 is an in-memory S3 endpoint on loopback.
type S3 struct {
	srv *http.Server
	ln  net.Listener
}

// StartS3 serves gofakes3 on 127.0.0.1 at addr ("" or ":0" picks a free port).
func StartS3(addr string) (*S3, error) { return serveS3(addr, s3mem.New()) }

// StartS3Dir serves, as StartS3 does, the buckets kept under dir
// (dir/buckets/BUCKET/KEY, their metadata in dir/metadata): what was put
// survives a restart, and a GET reads its file rather than memory.
func StartS3Dir(addr, dir string) (*S3, error) {
	fs, err := s3afero.NewBasePathFs(afero.NewOsFs(), dir, s3afero.FsPathCreateAll)
	if err != nil {
		return nil, fmt.Errorf("s3 store %s: %w", dir, err)
	}
	backend, err := s3afero.MultiBucket(fs)
	if err != nil {
		return nil, fmt.Errorf("s3 store %s: %w", dir, err)
	}
	return serveS3(addr, backend)
}

func serveS3(addr string, backend gofakes3.Backend) (*S3, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for s3 on %s: %w", addr, err)
	}
	faker := gofakes3.New(backend, gofakes3.WithTimeSkewLimit(0))
	s := &S3{ln: ln, srv: &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second}}
	// Serve only fails if the listener breaks; clients then get connection
	// errors naming the endpoint, so there is nothing to report here.
	go s.srv.Serve(ln)
	return s, nil
}

// Endpoint is the http:// URL to use as the S3 endpoint (path-style).
func (s *S3) Endpoint() string { return "http://" + s.ln.Addr().String() }

// Close stops the endpoint.
func (s *S3) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}
