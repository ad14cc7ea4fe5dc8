// Package kubeconfig finds the Kubernetes API the way kubectl and kn do.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Load returns the configuration of the kubeconfig file when one is named,
// else $KUBECONFIG or ~/.kube/config, else the pod's own ServiceAccount
// (in-cluster), with userAgent set; and the namespace that configuration
// names: the kubeconfig context's, in a pod its own ("default" when none).
func Load(kubeconfig, userAgent string) (*rest.Config, string, error) {
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
	cfg.UserAgent = userAgent
	return cfg, ns, nil
}
