package main

import (
	"fmt"
	"net"

	"github.com/sluice-project/sluice/internal/bearer"
)

// loadToken is a parse check that reads f's token into *out.
func loadToken(f *bearer.Flag, out *bearer.Token) func() error {
	return func() error {
		t, err := f.Load()
		*out = t
		return err
	}
}

// listenAuthed listens on addr for an endpoint that requires src's token:
// beyond loopback it refuses to serve without one, unless insecure. It
// also says, for the log, how requests are checked.
func listenAuthed(addr string, src bearer.Source, tok bearer.Token, insecure bool) (net.Listener, string, error) {
	// Before binding, so that a refused address is never open, and after
	// (a host name may resolve otherwise for Listen).
	if a, err := net.ResolveTCPAddr("tcp", addr); err == nil {
		if err := src.CheckListener(a, tok, insecure); err != nil {
			return nil, "", err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listening on %s: %w", addr, err)
	}
	if err := src.CheckListener(ln.Addr(), tok, insecure); err != nil {
		ln.Close()
		return nil, "", err
	}
	auth := "bearer token"
	switch {
	case tok.IsSet():
	case insecure:
		auth = "none (--" + bearer.InsecureFlag + ")"
	default:
		auth = "none (loopback)"
	}
	return ln, auth, nil
}
