// Package supervise runs one child process: it starts it, reaps it in the
// background (Done, Err, State), signals it, and stops it (Stop: SIGTERM,
// then SIGKILL after a grace). The local actuator runs its replicas with
// it, the integration suite its servers, the load test its controller and
// agents, k8senv its etcd and kube-apiserver.
//
// Options are what callers differ in, kept small rather than forked:
// Group puts the child in its own process group and signals the group (so
// a Ctrl-C at the terminal reaches the parent only, and a Stop reaches
// what the child started); DieWithParent has the Linux kernel SIGKILL the
// child when its parent dies; Stdout reads the child's stdout, and the
// child is reaped only once it returned, so no output is lost.
//
// It is a leaf: it imports no Sluice package.
package supervise
