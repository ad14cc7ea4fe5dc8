package k8senv

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/supervise"
	"k8s.io/client-go/rest"
)

// Version is the Kubernetes release .ci/k8s-testbin/build.sh builds.
const Version = "v1.34.2"

// BinDirEnv overrides where the etcd and kube-apiserver binaries are.
const BinDirEnv = "SLUICE_K8S_TESTBIN"

// adminToken authenticates the tests' administrator (system:masters).
const adminToken = "sluice-test-admin"

// ErrNoBinaries means etcd or kube-apiserver has not been built.
var ErrNoBinaries = errors.New("k8senv: etcd and kube-apiserver not built: run `bash .ci/k8s-testbin/build.sh` (about 11 minutes once, cached in ~/.cache/sluice/k8s-testbin)")

// BinDir is where the binaries are looked for.
func BinDir() string {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "sluice", "k8s-testbin", Version)
}

// Env is a running API server.
type Env struct {
	// Host is the API server's URL (https://127.0.0.1:PORT).
	Host string
	// Kubeconfig is a file with the administrator's credentials.
	Kubeconfig string
	// CAFile is the CA that signed the server's certificate.
	CAFile string
	dir    string
}

// Start runs etcd and kube-apiserver for t on free loopback ports, installs
// Knative Serving's CRDs from the module cache (knative.dev/serving, the
// version in go.mod) and stops both when t ends.
func Start(t testing.TB) *Env {
	t.Helper()
	bins := BinDir()
	requireTools(t, bins)
	dir := t.TempDir()
	p, err := writePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+",admin,admin-uid,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 3)
	etcdURL := startEtcd(t, dir, bins, ports[0], ports[1])

	e := &Env{Host: fmt.Sprintf("https://127.0.0.1:%d", ports[2]), CAFile: p.caCert, dir: dir,
		Kubeconfig: filepath.Join(dir, "admin.kubeconfig")}
	startProcess(t, dir, "kube-apiserver", filepath.Join(bins, "kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", fmt.Sprint(ports[2]),
		"--tls-cert-file", p.serverCert, "--tls-private-key-file", p.serverKey, "--client-ca-file", p.caCert,
		"--cert-dir", filepath.Join(dir, "certs"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", p.saPub, "--service-account-signing-key-file", p.saKey,
		// A range for Service IPs the apiserver must have in its config;
		// nothing connects to it (no kube-proxy here).
		"--service-cluster-ip-range", "10.0.0.0/24", "--endpoint-reconciler-type", "none",
		"--authorization-mode", "RBAC", "--token-auth-file", tokens, "--anonymous-auth=false",
		"--profiling=false", "--v=1")
	if err := e.writeKubeconfig(e.Kubeconfig, adminToken); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t)

	crds, err := KnativeCRDDir()
	if err != nil {
		t.Fatal(err)
	}
	e.Kubectl(t, "apply", "--server-side", "-f", crds)
	e.Kubectl(t, "wait", "--for", "condition=established", "--timeout=60s", "crd", "--all")
	return e
}

// requireTools skips t (fails it in CI) without the binaries in bins, and
// skips it without kubectl.
func requireTools(t testing.TB, bins string) {
	t.Helper()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bins, b)); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal(ErrNoBinaries)
			}
			t.Skip(ErrNoBinaries)
		}
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("k8senv: kubectl not on PATH")
	}
}

// startEtcd starts etcd on loopback and waits for it to be healthy; it
// returns its client URL.
func startEtcd(t testing.TB, dir, bins string, clientPort, peerPort int) string {
	t.Helper()
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	startProcess(t, dir, "etcd", filepath.Join(bins, "etcd"),
		"--name", "default", "--data-dir", filepath.Join(dir, "etcd-data"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL, "--unsafe-no-fsync", "--log-level", "warn")
	waitFor(t, 20*time.Second, func() error {
		resp, err := http.Get(etcdURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return etcdURL
}

// waitReady waits for the apiserver's /readyz, as the admin.
func (e *Env) waitReady(t testing.TB) {
	t.Helper()
	hc, err := e.httpClient()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, e.Host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
}

// KnativeCRDDir is Knative Serving's CRD directory in the module cache.
func KnativeCRDDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "knative.dev/serving").Output()
	if err != nil {
		return "", fmt.Errorf("finding knative.dev/serving in the module cache: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "config", "core", "300-resources"), nil
}

// Admin is the administrator's REST config.
func (e *Env) Admin() *rest.Config { return e.WithToken(adminToken) }

// WithToken is a REST config authenticating with a bearer token (a
// ServiceAccount's, from Token).
func (e *Env) WithToken(token string) *rest.Config {
	return &rest.Config{Host: e.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: e.CAFile},
		QPS: 100, Burst: 200}
}

// Token is a fresh token of ServiceAccount ns/name (the TokenRequest API).
func (e *Env) Token(t testing.TB, ns, name string) string {
	t.Helper()
	return strings.TrimSpace(e.Kubectl(t, "create", "token", "-n", ns, name, "--duration=1h"))
}

// Kubeconfig writes a kubeconfig file for token and returns its path.
func (e *Env) KubeconfigFor(t testing.TB, token string) string {
	t.Helper()
	f, err := os.CreateTemp(e.dir, "*.kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := e.writeKubeconfig(f.Name(), token); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// Kubectl runs kubectl as the administrator and returns its stdout; it
// fails t with kubectl's stderr.
func (e *Env) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.KubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// KubectlErr runs kubectl as the administrator; the error carries stderr.
func (e *Env) KubectlErr(args ...string) (string, error) {
	return e.KubectlAs(e.Kubeconfig, args...)
}

// KubectlAs runs kubectl with the given kubeconfig.
func (e *Env) KubectlAs(kubeconfig string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func (e *Env) writeKubeconfig(path, token string) error {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority: %q}
users:
- name: user
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: user, namespace: default}
current-context: test
`, e.Host, e.CAFile, token)
	return os.WriteFile(path, []byte(kc), 0o600)
}

func (e *Env) httpClient() (*http.Client, error) {
	pem, err := os.ReadFile(e.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}

// freePorts reserves n loopback ports and releases them for the servers;
// another process could take one in between, which a failed start shows.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// startProcess runs a server with its output in dir/name.log, and stops it
// (SIGTERM, SIGKILL after 10s) when t ends. If t fails, the log's end is
// printed.
func startProcess(t testing.TB, dir, name, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := supervise.Start(cmd, supervise.Options{})
	if err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			_ = p.Stop(10 * time.Second)
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("%s log (end):\n%s", name, b)
			}
		})
	})
}

// waitFor polls f until it returns nil, failing t after total.
func waitFor(t testing.TB, total time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("k8senv: not ready after %v: %v", total, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
