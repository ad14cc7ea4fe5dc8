package knative

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	servingv1client "knative.dev/serving/pkg/client/clientset/versioned/typed/serving/v1"
)

// Client builds the Knative Serving client the way kubectl and kn find a
// cluster: the kubeconfig file when one is named, else $KUBECONFIG or
// ~/.kube/config, else the pod's own ServiceAccount (in-cluster). It also
// returns the namespace that configuration names: the kubeconfig
// context's, in a pod its own ("default" when none).
func Client(kubeconfig string) (servingv1client.ServingV1Interface, string, error) {
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
	c, err := NewClient(cfg)
	return c, ns, err
}

// NewClient is the Knative Serving v1 client for cfg.
func NewClient(cfg *rest.Config) (servingv1client.ServingV1Interface, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sluice-controller"
	}
	cs, err := servingclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("knative serving client: %w", err)
	}
	return cs.ServingV1(), nil
}
