package kubejobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Leader election timings: a standby takes over within about
// leaseDuration of the active one dying.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// ErrLostLease means another replica took the lease: this one stops, and
// its process is restarted as a standby.
var ErrLostLease = errors.New("kube-jobs: lost the leader lease")

// RunElected runs run while this replica holds the Lease namespace/name
// (coordination.k8s.io), as identity, so that one replica of several
// reconciles. It returns once ctx ends (nil, the lease released) or the
// lease is lost (ErrLostLease).
func RunElected(ctx context.Context, client kubernetes.Interface, namespace, name, identity string, logger *slog.Logger, run func(context.Context) error) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	var runErr error
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ReleaseOnCancel: true, Name: name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("leading: reconciling", "lease", namespace+"/"+name, "identity", identity)
				if err := run(ctx); err != nil {
					runErr = err
				}
				cancel()
			},
			OnStoppedLeading: func() { logger.Info("not leading", "lease", namespace+"/"+name) },
		},
	})
	if err != nil {
		return fmt.Errorf("kube-jobs leader election: %w", err)
	}
	le.Run(lctx)
	switch {
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		return nil
	}
	return ErrLostLease
}

// RESTConfig finds the Kubernetes API as kubectl does: the kubeconfig
// file when one is named, else $KUBECONFIG or ~/.kube/config, else the
// pod's own ServiceAccount. It also returns that configuration's
// namespace (in a pod its own; "default" when none).
func RESTConfig(kubeconfig string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("finding the kubernetes API: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "sluice-kube-jobs"
	return cfg, ns, nil
}
