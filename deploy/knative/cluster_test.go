package knative_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/autoscale/knative"
	"github.com/sluice-project/sluice/internal/k8senv"
)

// TestIntegrationManifestsOnAPIServer applies the example overlay to a real
// kube-apiserver (server-side dry run, then server-side apply) and runs the
// Knative actuator with the token of the manifests' own ServiceAccount:
// RBAC lets it read and patch the function Service and list its
// Revisions, and forbids the rest.
func TestIntegrationManifestsOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver: skipped with -short")
	}
	env := k8senv.Start(t)
	const ns = "sluice"
	env.Kubectl(t, "create", "namespace", ns)
	env.Kubectl(t, "create", "namespace", "elsewhere")

	// A dry run stores nothing.
	out := env.Kubectl(t, "apply", "--server-side", "--dry-run=server", "-k", "overlays/example")
	if !strings.Contains(out, "service.serving.knative.dev/sluice-fn serverside-applied (server dry run)") {
		t.Errorf("dry run output lacks the function Service:\n%s", out)
	}
	if _, err := env.KubectlErr("get", "-n", ns, "ksvc", "sluice-fn"); err == nil {
		t.Error("the dry run stored the Service")
	}
	out = env.Kubectl(t, "apply", "--server-side", "-k", "overlays/example")
	for _, want := range []string{"serviceaccount/sluice-controller", "role.rbac.authorization.k8s.io/sluice-controller",
		"rolebinding.rbac.authorization.k8s.io/sluice-controller", "configmap/sluice-config", "deployment.apps/sluice-controller",
		"statefulset.apps/sluice-nats", "service.serving.knative.dev/sluice-fn", "networkpolicy.networking.k8s.io/sluice-fn"} {
		if !strings.Contains(out, want+" serverside-applied") {
			t.Errorf("apply output lacks %s:\n%s", want, out)
		}
	}
	// Applying again changes nothing (no field fights between our files).
	env.Kubectl(t, "apply", "--server-side", "-k", "overlays/example")
	// An object in another namespace the controller must not touch.
	env.Kubectl(t, "apply", "--server-side", "-n", "elsewhere", "-f", "base/function.yaml")
	// The NATS passwords, one per component (nats/nats.conf's users).
	env.Kubectl(t, "create", "secret", "generic", "-n", ns, "sluice-nats-auth", "--from-literal=controller=pw1",
		"--from-literal=cli=pw3", "--from-literal=admin=pw4", "--from-literal=callout-seed=SA...", "--from-literal=callout-issuer=A...")

	token := env.Token(t, ns, "sluice-controller")
	client, err := knative.NewClient(env.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("allowed: the actuator's work", func(t *testing.T) {
		a, err := knative.New(client, knative.Options{Namespace: ns, Concurrency: 4, MaxScale: 16}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Sync(ctx); err != nil {
			t.Fatalf("Sync as the controller: %v", err)
		}
		if err := a.StartJob(ctx, "j1", autoscale.JobBounds{MinReplicas: 2, MaxReplicas: 8}); err != nil {
			t.Fatalf("StartJob (patches min-scale) as the controller: %v", err)
		}
		svc, err := client.Services(ns).Get(ctx, "sluice-fn", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := svc.Spec.Template.Annotations["autoscaling.knative.dev/min-scale"]; got != "2" {
			t.Errorf("min-scale %q after StartJob, want 2", got)
		}
		if err := a.EndJob(ctx, "j1"); err != nil {
			t.Fatalf("EndJob as the controller: %v", err)
		}
		// The controller's patches leave the manifests' other fields alone.
		if got := svc.Spec.Template.Annotations["autoscaling.knative.dev/target"]; got != "4" {
			t.Errorf("target %q after the patch, want the manifest's 4", got)
		}
	})

	forbidden := func(t *testing.T, what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: err %v, want forbidden", what, err)
		}
	}
	t.Run("forbidden: other namespaces", func(t *testing.T) {
		_, err := client.Services("elsewhere").Get(ctx, "sluice-fn", metav1.GetOptions{})
		forbidden(t, "get a Service in another namespace", err)
		_, err = client.Revisions("elsewhere").List(ctx, metav1.ListOptions{})
		forbidden(t, "list Revisions in another namespace", err)
		a, _ := knative.New(client, knative.Options{Namespace: "elsewhere", Concurrency: 4}, nil, nil)
		forbidden(t, "Sync in another namespace", errorsUnwrapAll(a.Sync(ctx)))
	})
	t.Run("forbidden: creating, deleting, listing Services", func(t *testing.T) {
		svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: "evil", Namespace: ns}}
		_, err := client.Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		forbidden(t, "create a Service", err)
		forbidden(t, "delete the function Service", client.Services(ns).Delete(ctx, "sluice-fn", metav1.DeleteOptions{}))
		_, err = client.Services(ns).List(ctx, metav1.ListOptions{})
		forbidden(t, "list Services", err)
	})
	t.Run("forbidden: patching anything of the Service but its scale bounds", func(t *testing.T) {
		// RBAC grants patch on the whole object; the admission policy
		// (base/admission.yaml) narrows it to the two annotations.
		// Dry runs: admission judges them, nothing is stored.
		dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
		image := `{"spec":{"template":{"spec":{"containers":[{"name":"fn","image":"evil.example/fn:latest"}]}}}}`
		// kube-apiserver loads a new policy within seconds, not at once.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if _, err := client.Services(ns).Patch(ctx, "sluice-fn", types.MergePatchType, []byte(image), dry); err != nil {
				break
			}
		}
		for _, tc := range []struct{ what, patch string }{
			{"the image", image},
			{"the cluster-local visibility label", `{"metadata":{"labels":{"networking.knative.dev/visibility":null}}}`},
			{"another template annotation", `{"spec":{"template":{"metadata":{"annotations":{"autoscaling.knative.dev/target":"1000"}}}}}`},
			{"the scale bounds and the image at once", `{"spec":{"template":{"metadata":{"annotations":{"autoscaling.knative.dev/min-scale":"1"}},"spec":{"containers":[{"name":"fn","image":"evil.example/fn:latest"}]}}}}`},
		} {
			_, err := client.Services(ns).Patch(ctx, "sluice-fn", types.MergePatchType, []byte(tc.patch), dry)
			forbidden(t, "patch "+tc.what, err)
		}
		if _, err := client.Services(ns).Patch(ctx, "sluice-fn", types.MergePatchType,
			[]byte(`{"spec":{"template":{"metadata":{"annotations":{"autoscaling.knative.dev/max-scale":"5"}}}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("patch max-scale as the controller: %v", err)
		}
		// The cluster's admin still may.
		env.Kubectl(t, "patch", "ksvc", "-n", ns, "sluice-fn", "--type", "merge", "-p",
			`{"spec":{"template":{"metadata":{"annotations":{"autoscaling.knative.dev/target":"8"}}}}}`)
	})
	t.Run("forbidden: secrets and core objects", func(t *testing.T) {
		kc := env.KubeconfigFor(t, token)
		for _, args := range [][]string{
			{"get", "secret", "-n", ns, "sluice-nats-auth"},
			{"get", "secret", "-n", ns, "sluice-fn-token"},
			{"get", "configmaps", "-n", ns},
			{"get", "pods", "-n", ns},
			{"create", "configmap", "-n", ns, "x", "--from-literal=a=b"},
			{"patch", "deployment", "-n", ns, "sluice-controller", "-p", `{"spec":{"replicas":3}}`},
		} {
			_, err := env.KubectlAs(kc, args...)
			if err == nil || !strings.Contains(err.Error(), "forbidden") {
				t.Errorf("kubectl %s as the controller: %v, want forbidden", strings.Join(args, " "), err)
			}
		}
		// What it may do, it may do through kubectl too.
		if _, err := env.KubectlAs(kc, "get", "ksvc", "-n", ns, "sluice-fn"); err != nil {
			t.Errorf("get the function Service as the controller: %v", err)
		}
	})
}

// errorsUnwrapAll returns the innermost error, so apierrors can read it.
func errorsUnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}
