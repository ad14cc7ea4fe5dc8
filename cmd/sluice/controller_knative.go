package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/autoscale/knative"
)

// knativeNamespaceEnv names the function Service's namespace when
// --knative-namespace is not given (deploy/knative sets it to the pod's).
const knativeNamespaceEnv = "SLUICE_KNATIVE_NAMESPACE"

// knativeFlags are `sluice controller`'s settings for --actuator knative.
type knativeFlags struct {
	service, namespace, url, kubeconfig *string
}

func registerKnativeFlags(fs *flag.FlagSet) knativeFlags {
	return knativeFlags{
		service:    fs.String("knative-service", knative.DefaultService, "with --actuator knative: the function's Knative Service"),
		namespace:  fs.String("knative-namespace", "", "with --actuator knative: the Service's namespace (env "+knativeNamespaceEnv+"; default: the kubeconfig's, in a pod its own)"),
		url:        fs.String("knative-url", "", "with --actuator knative: where to send tasks (default: the Service's cluster-local address from its status)"),
		kubeconfig: fs.String("kubeconfig", "", "with --actuator knative: kubeconfig `file` (default: $KUBECONFIG, ~/.kube/config, else the pod's ServiceAccount)"),
	}
}

// actuator connects to the cluster and reads the Service once, so a
// missing Service, namespace or right fails the command at start.
func (k knativeFlags) actuator(ctx context.Context, concurrency, maxReplicas int, kpaAlone bool, logger *slog.Logger, reg prometheus.Registerer) (*knative.Actuator, error) {
	client, ns, err := knative.Client(*k.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--actuator knative: %w", err)
	}
	if v := os.Getenv(knativeNamespaceEnv); v != "" {
		ns = v
	}
	if *k.namespace != "" {
		ns = *k.namespace
	}
	act, err := knative.New(client, knative.Options{
		Namespace: ns, Service: *k.service, URL: *k.url,
		Concurrency: concurrency, MaxScale: maxReplicas, KPAAlone: kpaAlone,
	}, logger, reg)
	if err != nil {
		return nil, err
	}
	if err := act.Sync(ctx); err != nil {
		return nil, fmt.Errorf("--actuator knative: %w", err)
	}
	return act, nil
}
