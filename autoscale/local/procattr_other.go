//go:build !linux

package local

import "syscall"

// procAttr puts a replica in its own process group. Outside Linux there is
// no parent-death signal: replicas of a controller killed with SIGKILL
// outlive it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
