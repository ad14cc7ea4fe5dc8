package knative_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestKubeJobsRoles: the reconciler's and the users' ClusterRoles name
// every verb, resource and group; the reconciler may create Secrets (a
// job's team key) but not read, list, change or delete one; the users'
// roles give nothing but SluiceJobs and SluiceSweeps; the viewer only reads.
func TestKubeJobsRoles(t *testing.T) {
	docs := render(t, "kube-jobs")
	roles := map[string]*rbacv1.ClusterRole{}
	for _, d := range find(docs, "rbac.authorization.k8s.io/v1", "ClusterRole") {
		r := decode[rbacv1.ClusterRole](t, d)
		roles[r.Name] = r
	}
	for _, name := range []string{"sluice-kube-jobs", "sluice-job-submitter", "sluice-job-viewer"} {
		r := roles[name]
		if r == nil {
			t.Fatalf("no ClusterRole %s", name)
		}
		for _, rule := range r.Rules {
			for _, list := range [][]string{rule.Verbs, rule.Resources, rule.APIGroups} {
				if slices.Contains(list, "*") {
					t.Errorf("%s: rule %+v has a wildcard", name, rule)
				}
			}
			for _, res := range rule.Resources {
				if res == "secrets" && (name != "sluice-kube-jobs" || !slices.Equal(rule.Verbs, []string{"create"})) {
					t.Errorf("%s: secrets %v, want only the reconciler's create", name, rule.Verbs)
				}
				if name != "sluice-kube-jobs" && !strings.HasPrefix(res, "sluicejobs") && !strings.HasPrefix(res, "sluicesweeps") {
					t.Errorf("%s: resource %s beyond SluiceJobs and SluiceSweeps", name, res)
				}
			}
			if name == "sluice-job-viewer" {
				for _, v := range rule.Verbs {
					if !slices.Contains([]string{"get", "list", "watch"}, v) {
						t.Errorf("viewer: verb %s", v)
					}
				}
			}
		}
	}
	deps := find(docs, "apps/v1", "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want the reconciler's", len(deps))
	}
	d := decode[appsv1.Deployment](t, deps[0])
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["SLUICE_NATS_USER"] != "sluice-admin" || env["SLUICE_KUBE_JOBS_KEY_FILE"] == "" {
		t.Errorf("reconciler env %v: want the admin NATS user and the key file", env)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		for _, it := range v.Secret.Items {
			if v.Secret.SecretName == "sluice-nats-auth" && it.Key != "admin" {
				t.Errorf("reconciler mounts NATS key %s, want the admin's only", it.Key)
			}
		}
	}
	if !slices.Contains(c.Args, "kube-jobs") || d.Spec.Template.Spec.ServiceAccountName != "sluice-kube-jobs" {
		t.Errorf("reconciler args %v, account %s", c.Args, d.Spec.Template.Spec.ServiceAccountName)
	}
}
