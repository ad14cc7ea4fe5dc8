package knative_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-project/sluice/autoscale/knative"
)

// kustomizations are the directories `kubectl apply -k` takes.
var kustomizations = []string{"base", "nats", "overlays/example"}

// doc is one rendered manifest.
type doc struct {
	Kind, APIVersion string
	raw              []byte
}

// render runs kustomize (built into kubectl) on dir.
func render(t *testing.T, dir string) []doc {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	out, err := exec.Command("kubectl", "kustomize", dir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufioReader(out))
	var docs []doc
	for {
		b, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var meta struct{ Kind, APIVersion string }
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		docs = append(docs, doc{meta.Kind, meta.APIVersion, b})
	}
	return docs
}

func decode[T any](t *testing.T, d doc) *T {
	t.Helper()
	var v T
	if err := yaml.UnmarshalStrict(d.raw, &v); err != nil {
		t.Fatalf("decoding %s: %v", d.Kind, err)
	}
	return &v
}

func find(docs []doc, apiVersion, kind string) []doc {
	var out []doc
	for _, d := range docs {
		if d.APIVersion == apiVersion && d.Kind == kind {
			out = append(out, d)
		}
	}
	return out
}

// TestKnativeAcceptsEveryService runs what Knative's admission webhook
// runs, SetDefaults then Validate, on every Service the kustomizations
// render, and checks the KPA would run what Sluice decides.
func TestKnativeAcceptsEveryService(t *testing.T) {
	seen := 0
	for _, dir := range kustomizations {
		for _, d := range find(render(t, dir), "serving.knative.dev/v1", "Service") {
			seen++
			svc := decode[servingv1.Service](t, d)
			ctx := apis.WithinCreate(context.Background())
			svc.SetDefaults(ctx)
			if err := svc.Validate(ctx); err != nil {
				t.Errorf("%s: Knative rejects Service %s: %v", dir, svc.Name, err)
			}
			// The same check refuses what the webhook would: a timeout
			// beyond Knative's maximum.
			bad := svc.DeepCopy()
			long := int64(3600)
			bad.Spec.Template.Spec.TimeoutSeconds = &long
			if err := bad.Validate(ctx); err == nil {
				t.Errorf("%s: Validate accepted timeoutSeconds 3600", dir)
			}
			for _, p := range knative.CheckService(svc, int(*svc.Spec.Template.Spec.ContainerConcurrency)) {
				t.Errorf("%s: Service %s: %s", dir, svc.Name, p)
			}
			c := svc.Spec.Template.Spec.Containers[0]
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Errorf("%s: readiness probe %+v, want GET /readyz", dir, c.ReadinessProbe)
			}
			if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("%s: liveness probe %+v, want GET /healthz", dir, c.LivenessProbe)
			}
			if ts := svc.Spec.Template.Spec.TimeoutSeconds; ts == nil || *ts > 600 {
				t.Errorf("%s: timeoutSeconds %v, want set and at most 600 (Knative's maximum)", dir, ts)
			}
			if c.Resources.Requests.Cpu().IsZero() {
				t.Errorf("%s: no CPU request", dir)
			}
		}
	}
	if seen != 2 {
		t.Errorf("%d Knative Services rendered, want 2 (base and the example overlay)", seen)
	}
}

// TestControllerAgreesWithTheFunction: the controller's concurrency and
// replica cap are the function's containerConcurrency and max-scale.
func TestControllerAgreesWithTheFunction(t *testing.T) {
	for _, dir := range []string{"base", "overlays/example"} {
		docs := render(t, dir)
		svc := decode[servingv1.Service](t, find(docs, "serving.knative.dev/v1", "Service")[0])
		dep := decode[appsv1.Deployment](t, find(docs, "apps/v1", "Deployment")[0])
		args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
		cc := svc.Spec.Template.Spec.ContainerConcurrency
		for _, want := range []string{
			"--actuator=knative",
			"--knative-service=" + svc.Name,
			"--replica-concurrency=" + itoa(*cc),
			"--max-replicas=" + svc.Spec.Template.Annotations["autoscaling.knative.dev/max-scale"],
		} {
			if !strings.Contains(args, want) {
				t.Errorf("%s: controller args %q lack %s", dir, args, want)
			}
		}
		fnArgs := strings.Join(svc.Spec.Template.Spec.Containers[0].Args, " ")
		if !strings.Contains(fnArgs, "--concurrency="+itoa(*cc)) {
			t.Errorf("%s: function args %q: want --concurrency=%d (its containerConcurrency)", dir, fnArgs, *cc)
		}
		if dep.Spec.Template.Spec.ServiceAccountName != "sluice-controller" {
			t.Errorf("%s: controller runs as %q", dir, dep.Spec.Template.Spec.ServiceAccountName)
		}
	}
}

// TestRoleHasNoWildcards: every verb, resource and group is named.
func TestRoleHasNoWildcards(t *testing.T) {
	roles := find(render(t, "base"), "rbac.authorization.k8s.io/v1", "Role")
	if len(roles) != 1 {
		t.Fatalf("%d Roles, want 1", len(roles))
	}
	role := decode[rbacv1.Role](t, roles[0])
	for _, r := range role.Rules {
		for _, list := range [][]string{r.Verbs, r.Resources, r.APIGroups, r.ResourceNames} {
			if slices.Contains(list, "*") {
				t.Errorf("rule %+v has a wildcard", r)
			}
		}
		for _, v := range r.Verbs {
			if !slices.Contains([]string{"get", "list", "patch"}, v) {
				t.Errorf("rule %+v: verb %q beyond what the actuator uses (get, list, patch)", r, v)
			}
		}
	}
	for _, k := range []string{"ClusterRole", "ClusterRoleBinding"} {
		if n := len(find(render(t, "overlays/example"), "rbac.authorization.k8s.io/v1", k)); n != 0 {
			t.Errorf("%d %s: want none, the controller works in its namespace", n, k)
		}
	}
}

// TestOnlyTheFunctionHasACloudRole: the example overlay gives S3 access
// to the function's ServiceAccount alone; the controller reads no data.
func TestOnlyTheFunctionHasACloudRole(t *testing.T) {
	const irsa = "eks.amazonaws.com/role-arn"
	var withRole []string
	for _, d := range find(render(t, "overlays/example"), "v1", "ServiceAccount") {
		sa := decode[corev1.ServiceAccount](t, d)
		if sa.Annotations[irsa] != "" {
			withRole = append(withRole, sa.Name)
		}
	}
	if !slices.Equal(withRole, []string{"sluice-fn"}) {
		t.Errorf("ServiceAccounts with %s: %v, want only sluice-fn", irsa, withRole)
	}
}

func itoa[T ~int64 | ~int32 | ~int](n T) string { return fmtInt(int64(n)) }
