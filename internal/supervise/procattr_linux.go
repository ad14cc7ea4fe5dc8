package supervise

import "syscall"

// procAttr sets the process group and the parent-death signal. Pdeathsig
// follows the thread that forked: Go only ends threads that a goroutine
// locked and did not unlock, and Start callers run on no such thread.
func procAttr(o Options) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: o.Group}
	if o.DieWithParent {
		a.Pdeathsig = syscall.SIGKILL
	}
	return a
}
