//go:build !linux

package lowwater

import "net"

// Wrap returns conn: the receive low-water mark batches reads as this
// package needs only on Linux.
func Wrap(c Config, conn net.Conn) net.Conn { return conn }
