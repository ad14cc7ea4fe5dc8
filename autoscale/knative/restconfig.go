package knative

import (
	"fmt"

	"github.com/sluice-project/sluice/internal/kubeconfig"

	"k8s.io/client-go/rest"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	servingv1client "knative.dev/serving/pkg/client/clientset/versioned/typed/serving/v1"
)

// Client builds the Knative Serving client the way kubectl and kn find a
// cluster (kubeconfig.Load), with the namespace that configuration names.
func Client(kubeconfigPath string) (servingv1client.ServingV1Interface, string, error) {
	cfg, ns, err := kubeconfig.Load(kubeconfigPath, "sluice-controller")
	if err != nil {
		return nil, "", err
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
