package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLockedDownAsShipped checks the deployment's locks on the real
// cluster: the function answers 401 without its token (through Knative's
// own data path), it has no route through the public ingress
// (cluster-local), and the controller's ServiceAccount can do only what its
// Role and the ValidatingAdmissionPolicy allow. The bridge CNI enforces no
// NetworkPolicy, so network-policy.yaml is applied but not exercised here.
func TestLockedDownAsShipped(t *testing.T) {
	e := need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("function needs its token", func(t *testing.T) {
		code := postHost(t, "http://"+fnService+"."+namespace+".svc.cluster.local/", "", "")
		if code != http.StatusUnauthorized {
			t.Fatalf("a task without the token through the Service URL: %d, want 401", code)
		}
		code = postHost(t, "http://"+fnService+"."+namespace+".svc.cluster.local/", "", "wrong-token")
		if code != http.StatusUnauthorized {
			t.Fatalf("a task with a wrong token: %d, want 401", code)
		}
	})

	t.Run("no route through the public ingress", func(t *testing.T) {
		// Traefik's public entrypoint, asked for the function by every name
		// Knative could give it: none routes.
		for _, host := range []string{fnService + "." + namespace + ".svc.cluster.local", fnService + "." + namespace + ".example.com", fnService + "." + namespace} {
			code := postHost(t, "http://traefik.traefik.svc.cluster.local/", host, e.secrets["fn-token"])
			if code != http.StatusNotFound {
				t.Errorf("public ingress, Host %s: %d, want 404", host, code)
			}
		}
		// The private entrypoint does route it (what the agents use).
		code := postHost(t, "http://traefik-internal.traefik.svc.cluster.local/", fnService+"."+namespace+".svc.cluster.local", "")
		if code != http.StatusUnauthorized {
			t.Errorf("cluster-local ingress without the token: %d, want 401 from the function", code)
		}
	})

	sa := "system:serviceaccount:" + namespace + ":sluice-controller"
	t.Run("controller RBAC", func(t *testing.T) {
		cases := []struct {
			verb, resource, ns string
			want               string
		}{
			{"patch", "services.serving.knative.dev/" + fnService, namespace, "yes"},
			{"get", "services.serving.knative.dev/" + fnService, namespace, "yes"},
			{"list", "revisions.serving.knative.dev", namespace, "yes"},
			{"patch", "services.serving.knative.dev/other", namespace, "no"},
			{"create", "services.serving.knative.dev", namespace, "no"},
			{"delete", "services.serving.knative.dev/" + fnService, namespace, "no"},
			{"get", "secrets", namespace, "no"},
			{"patch", "services.serving.knative.dev/" + fnService, "default", "no"},
			{"create", "pods", namespace, "no"},
		}
		for _, c := range cases {
			out, _ := e.kubectl(ctx, "auth", "can-i", c.verb, c.resource, "-n", c.ns, "--as", sa)
			if got := strings.TrimSpace(out); got != c.want {
				t.Errorf("controller may %s %s in %s: %q, want %q", c.verb, c.resource, c.ns, got, c.want)
			}
		}
	})

	t.Run("admission policy", func(t *testing.T) {
		// Server-side dry runs go through admission without making a Revision.
		patch := func(p string) error {
			_, err := e.kubectl(ctx, "-n", namespace, "patch", "ksvc", fnService, "--as", sa,
				"--type", "merge", "--dry-run=server", "-p", p)
			return err
		}
		if err := patch(`{"spec":{"template":{"metadata":{"annotations":{"autoscaling.knative.dev/min-scale":"1"}}}}}`); err != nil {
			t.Errorf("the controller's min-scale patch was refused: %v", err)
		}
		err := patch(`{"spec":{"template":{"spec":{"containers":[{"name":"fn","image":"dev.local/evil:1"}]}}}}`)
		if err == nil || !strings.Contains(err.Error(), "may not change the function's pod spec") {
			t.Errorf("the controller changing the image: %v, want the policy's refusal", err)
		}
		err = patch(`{"metadata":{"labels":{"networking.knative.dev/visibility":null}}}`)
		if err == nil || !strings.Contains(err.Error(), "labels") {
			t.Errorf("the controller making the function public: %v, want the policy's refusal", err)
		}
	})
}

// postHost POSTs a body that is no task to url with the Host header
// host (when set) and the bearer token (when set); it returns the status.
func postHost(t *testing.T, url, host, token string) int {
	t.Helper()
	code, err := post(context.Background(), url, host, token)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// post sends an empty task to url (with Host host and token where set)
// and returns the status code.
func post(ctx context.Context, url, host, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		return 0, err
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("POST %s (Host %s): %w", url, host, err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
