package knative_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	knetworking "knative.dev/networking/pkg/apis/networking"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	qpports "knative.dev/serving/pkg/networking"

	"github.com/sluice-project/sluice/internal/bearer"
)

// TestFunctionIsLockedDown: the function Service is cluster-local, takes
// the function token from a Secret (required, never a literal, never an
// argument), does not opt out of authentication, and a NetworkPolicy
// selects its pods and admits only Knative's data path and the agents,
// to queue-proxy's ports only.
func TestFunctionIsLockedDown(t *testing.T) {
	for _, dir := range []string{"base", "overlays/example"} {
		docs := render(t, dir)
		svc := decode[servingv1.Service](t, find(docs, "serving.knative.dev/v1", "Service")[0])
		if got := svc.Labels[knetworking.VisibilityLabelKey]; got != serving.VisibilityClusterLocal {
			t.Errorf("%s: Service label %s = %q, want %q", dir, knetworking.VisibilityLabelKey, got, serving.VisibilityClusterLocal)
		}
		c := svc.Spec.Template.Spec.Containers[0]
		var tokenEnv *corev1.EnvVar
		for i, e := range c.Env {
			if e.Name == bearer.Function.Env {
				tokenEnv = &c.Env[i]
			}
			if e.Name == bearer.Function.FileEnv() {
				t.Errorf("%s: %s set too", dir, e.Name)
			}
		}
		switch {
		case tokenEnv == nil:
			t.Errorf("%s: no %s in the function's environment", dir, bearer.Function.Env)
		case tokenEnv.Value != "" || tokenEnv.ValueFrom == nil || tokenEnv.ValueFrom.SecretKeyRef == nil:
			t.Errorf("%s: %s = %+v, want it from a Secret", dir, tokenEnv.Name, tokenEnv)
		case tokenEnv.ValueFrom.SecretKeyRef.Optional != nil && *tokenEnv.ValueFrom.SecretKeyRef.Optional:
			t.Errorf("%s: the token's Secret is optional: a pod would start without it", dir)
		}
		for _, a := range append(slices.Clone(c.Args), c.Command...) {
			if strings.Contains(a, bearer.InsecureFlag) || strings.Contains(a, "token") {
				t.Errorf("%s: function argument %q", dir, a)
			}
		}

		pols := find(docs, "networking.k8s.io/v1", "NetworkPolicy")
		if len(pols) != 1 {
			t.Fatalf("%s: %d NetworkPolicies, want 1", dir, len(pols))
		}
		np := decode[networkingv1.NetworkPolicy](t, pols[0])
		if np.Namespace != svc.Namespace {
			t.Errorf("%s: NetworkPolicy in namespace %q, the Service in %q", dir, np.Namespace, svc.Namespace)
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		// Knative gives a revision's pods the template's labels.
		if sel.Empty() || !sel.Matches(labels.Set(svc.Spec.Template.Labels)) {
			t.Errorf("%s: NetworkPolicy selects %v, not the function's pods %v", dir, sel, svc.Spec.Template.Labels)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("%s: policy types %v, want Ingress", dir, np.Spec.PolicyTypes)
		}
		queueProxy := []int32{qpports.BackendHTTPPort, qpports.BackendHTTP2Port, qpports.AutoscalingQueueMetricsPort}
		knativeAdmitted, agentsAdmitted := false, false
		for i, r := range np.Spec.Ingress {
			if len(r.From) == 0 || len(r.Ports) == 0 {
				t.Errorf("%s: ingress rule %d admits every source or every port: %+v", dir, i, r)
			}
			for _, p := range r.Ports {
				if p.Port == nil || !slices.Contains(queueProxy, p.Port.IntVal) {
					t.Errorf("%s: ingress rule %d admits port %v, want only queue-proxy's %v", dir, i, p.Port, queueProxy)
				}
			}
			for _, f := range r.From {
				if f.IPBlock != nil {
					t.Errorf("%s: ingress rule %d admits an IP block %v", dir, i, f.IPBlock)
				}
				switch {
				case f.NamespaceSelector != nil && f.PodSelector == nil:
					ns := f.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]
					if ns == "" {
						t.Errorf("%s: ingress rule %d admits namespaces %v: want them named", dir, i, f.NamespaceSelector)
					}
					knativeAdmitted = knativeAdmitted || ns == "knative-serving"
				case f.PodSelector != nil:
					if f.PodSelector.MatchLabels["app.kubernetes.io/component"] != "sluice-agent" {
						t.Errorf("%s: ingress rule %d admits pods %v, want the agents", dir, i, f.PodSelector)
					}
					agentsAdmitted = true
				}
			}
		}
		if !knativeAdmitted || !agentsAdmitted {
			t.Errorf("%s: Knative's namespace admitted %v, the agents %v: want both", dir, knativeAdmitted, agentsAdmitted)
		}
	}
}
