// Command pause is the real cluster's pod sandbox image: it holds a pod's
// namespaces and does nothing until it is told to stop, as Kubernetes'
// own pause container does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
