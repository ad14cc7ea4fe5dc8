//go:build !linux

package supervise

import "syscall"

// procAttr sets the process group. Outside Linux there is no parent-death
// signal: the children of a parent killed with SIGKILL outlive it.
func procAttr(o Options) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: o.Group}
}
