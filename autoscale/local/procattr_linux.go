package local

import "syscall"

// procAttr puts a replica in its own process group (see the package doc)
// and has the kernel SIGKILL it when the process that started it dies, so
// a controller killed with SIGKILL leaves no orphaned replicas. Pdeathsig
// follows the thread that forked: Go only ends threads that a goroutine
// locked and did not unlock, and Scale runs on no such thread.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
