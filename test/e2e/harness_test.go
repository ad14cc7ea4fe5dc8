// Package e2e holds the scenarios run on a real Kubernetes with Knative
// Serving (make e2e-knative). The scenario files are numbered because Go
// runs tests in file order, and the order saves minutes: the function
// scales to zero about a minute after its last request, so the scenarios
// that need it at zero (4 to 6) come after those that only need it
// running, each finding it where the one before left it, and the cold
// starts (6) come last of those, since each of their rounds waits for a
// scale to zero of its own.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nkeys"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/test/integration"
)

// The namespace and names the manifests in cluster/manifests/sluice give.
const (
	namespace = "sluice"
	fnService = "sluice-fn"
	natsURL   = "nats://sluice-nats.sluice.svc.cluster.local:4222"
	s3URL     = "http://sluice-s3.sluice.svc.cluster.local:7070"
)

// env is the cluster the tests run against: what up.sh wrote in its env
// file, the clients, and the secrets the tests created for the deployment.
type env struct {
	state, bin, kubeconfig string
	kube                   kubernetes.Interface
	serving                servingclient.Interface
	sluice                 string // the sluice binary built for the node's processes
	dir                    string // logs and files of this run
	suffix                 string // this test's suffix of job ids and dataset prefixes
	artifacts              string // where charts go (SLUICE_E2E_ARTIFACTS, else dir)
	secrets                map[string]string
	nodes                  int // the cluster's nodes (up.sh's SLUICE_E2E_NODES)
}

// nodeNetns and nodeIP are node n's network namespace and address, as
// up.sh makes them (n from 1).
func nodeNetns(n int) string {
	if n == 1 {
		return "sluice-e2e"
	}
	return fmt.Sprintf("sluice-e2e-%d", n)
}

func nodeIP(n int) string { return fmt.Sprintf("10.%d.0.1", 87+n) }

var cluster *env

// TestMain runs the tests only on a real cluster: inside the network
// namespace of test/e2e/cluster/up.sh (ip netns exec sluice-e2e), with
// SLUICE_E2E_STATE naming its state directory. Elsewhere (make test) every
// test skips.
func TestMain(m *testing.M) {
	state := os.Getenv("SLUICE_E2E_STATE")
	if state == "" {
		fmt.Println("e2e: SLUICE_E2E_STATE is not set: no real cluster, skipping (make e2e-knative runs these)")
		os.Exit(m.Run())
	}
	e, err := setUp(state)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	cluster = e
	os.Exit(m.Run())
}

// need skips t without a real cluster. Each test gets a suffix of its own:
// a job's id stays taken after it ends, and SLUICE_E2E_COUNT runs a test
// again on the same cluster. The tests run one at a time.
func need(t *testing.T) *env {
	t.Helper()
	if cluster == nil {
		t.Skip("no real cluster (SLUICE_E2E_STATE unset): make e2e-knative runs this")
	}
	cluster.suffix = randomHex(3)
	return cluster
}

func setUp(state string) (*env, error) {
	vars, err := readEnvFile(filepath.Join(state, "env"))
	if err != nil {
		return nil, err
	}
	e := &env{state: state, bin: vars["SLUICE_E2E_BIN"], kubeconfig: vars["KUBECONFIG"], secrets: map[string]string{}, nodes: 1}
	if n, err := strconv.Atoi(vars["SLUICE_E2E_NODES"]); err == nil {
		e.nodes = n
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if e.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if e.serving, err = servingclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if e.dir, err = os.MkdirTemp(state, "tests-"); err != nil {
		return nil, err
	}
	if e.artifacts = os.Getenv("SLUICE_E2E_ARTIFACTS"); e.artifacts == "" {
		e.artifacts = e.dir
	} else if err := os.MkdirAll(e.artifacts, 0o755); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := testenv.ModuleRoot()
	if err != nil {
		return nil, err
	}
	// run.sh builds it outside the namespace (no module proxy inside).
	if e.sluice = os.Getenv("SLUICE_BIN"); e.sluice == "" {
		if e.sluice, err = integration.BuildSluice(ctx, root, e.dir); err != nil {
			return nil, err
		}
	}
	if err := e.deploy(ctx, root); err != nil {
		return nil, fmt.Errorf("deploying sluice: %w", err)
	}
	return e, nil
}

func readEnvFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's env file (did up.sh finish?): %w", err)
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	return vars, nil
}

// deploy installs Sluice as the deploy README tells a user to: the
// secrets first, then the kustomization (the shipped base and NATS with the
// small-node sizes, the local images, an S3 server), and waits until the
// function Service is Ready and the controller, NATS and S3 run.
func (e *env) deploy(ctx context.Context, root string) error {
	// On a cluster deployed before (a second run against one kept up), the
	// secrets the pods already hold.
	if e.readSecrets(ctx) {
		return e.applySluice(ctx, root)
	}
	for _, k := range []string{"controller", "cli", "admin", "route", "fn-token", "s3-access", "s3-secret"} {
		e.secrets[k] = randomHex(24)
	}
	// The auth callout's key pair (`sluice nats callout-key` makes one):
	// the controller lets each job's agents in as their job with it.
	callout, err := nkeys.CreateAccount()
	if err != nil {
		return err
	}
	seed, _ := callout.Seed()
	pub, _ := callout.PublicKey()
	e.secrets["callout-seed"], e.secrets["callout-issuer"] = string(seed), pub
	secrets := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Secret
metadata: {name: sluice-nats-auth, namespace: %[1]s}
stringData: {controller: %[2]s, cli: %[3]s, admin: %[4]s, callout-seed: %[8]s, callout-issuer: %[9]s, route: %[10]s}
---
apiVersion: v1
kind: Secret
metadata: {name: sluice-fn-token, namespace: %[1]s}
stringData: {token: %[5]s}
---
apiVersion: v1
kind: Secret
metadata: {name: sluice-s3-credentials, namespace: %[1]s}
stringData: {access: %[6]s, secret: %[7]s}
`, namespace, e.secrets["controller"], e.secrets["cli"], e.secrets["admin"],
		e.secrets["fn-token"], e.secrets["s3-access"], e.secrets["s3-secret"], e.secrets["callout-seed"], e.secrets["callout-issuer"],
		e.secrets["route"])
	// Secrets on stdin, never on a command line.
	if _, err := e.kubectlIn(ctx, secrets, "apply", "-f", "-"); err != nil {
		return err
	}
	return e.applySluice(ctx, root)
}

// readSecrets reads the secrets of a deployment made before, if there is
// one.
func (e *env) readSecrets(ctx context.Context) bool {
	get := func(name string) map[string][]byte {
		s, err := e.kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return s.Data
	}
	nats, fn, s3 := get("sluice-nats-auth"), get("sluice-fn-token"), get("sluice-s3-credentials")
	if nats == nil || fn == nil || s3 == nil {
		return false
	}
	for _, k := range []string{"controller", "cli", "admin", "callout-seed", "callout-issuer", "route"} {
		e.secrets[k] = string(nats[k])
	}
	if e.secrets["callout-issuer"] == "" || e.secrets["route"] == "" {
		return false // deployed before agents connected as their jobs, or before NATS ran as a cluster
	}
	e.secrets["fn-token"] = string(fn["token"])
	e.secrets["s3-access"], e.secrets["s3-secret"] = string(s3["access"]), string(s3["secret"])
	return true
}

// applySluice applies the kustomization and waits for it to run.
func (e *env) applySluice(ctx context.Context, root string) error {
	// The key the SluiceJob reconciler derives team keys from, made once
	// (a cluster kept up from before it existed gets one now).
	if _, err := e.kube.CoreV1().Secrets(namespace).Get(ctx, "sluice-kube-jobs-key", metav1.GetOptions{}); err != nil {
		key := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: sluice-kube-jobs-key, namespace: %s}\nstringData: {key: %s}\n",
			namespace, randomHex(32))
		if _, err := e.kubectlIn(ctx, key, "apply", "-f", "-"); err != nil {
			return err
		}
	}
	if _, err := e.kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(root, "test/e2e/cluster/manifests/sluice")); err != nil {
		return err
	}
	waits := [][]string{
		{"-n", namespace, "rollout", "status", "statefulset/sluice-nats", "--timeout=180s"},
		{"-n", namespace, "rollout", "status", "deployment/sluice-s3", "--timeout=180s"},
		{"-n", namespace, "rollout", "status", "deployment/sluice-controller", "--timeout=180s"},
		{"-n", namespace, "rollout", "status", "deployment/sluice-kube-jobs", "--timeout=180s"},
		{"-n", namespace, "wait", "--for=condition=Ready", "ksvc/" + fnService, "--timeout=300s"},
	}
	for _, w := range waits {
		if _, err := e.kubectl(ctx, w...); err != nil {
			return fmt.Errorf("%w\n%s", err, e.deployState(ctx))
		}
	}
	return waitRouted(ctx, "http://"+fnService+"."+namespace+".svc.cluster.local/")
}

// deployState is what a deploy that did not become ready left: Sluice's
// and Knative's objects and pods, and the namespace's latest events.
func (e *env) deployState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second) // the deploy's own may be spent
	defer cancel()
	var b strings.Builder
	for _, args := range [][]string{
		{"-n", namespace, "get", "ksvc,configurations,revisions,podautoscalers,kingresses,pods", "-o", "wide"},
		{"-n", "knative-serving", "get", "pods", "-o", "wide"},
		{"-n", namespace, "get", "ksvc/" + fnService, "-o", "jsonpath={.status.conditions}"},
		{"-n", namespace, "get", "events", "--sort-by=.lastTimestamp"},
	} {
		out, err := e.kubectl(ctx, args...)
		if err != nil {
			out = err.Error()
		}
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) > 40 {
			out = strings.Join(lines[len(lines)-40:], "\n")
		}
		fmt.Fprintf(&b, "$ kubectl %s\n%s\n", strings.Join(args, " "), out)
	}
	return b.String()
}

// waitRouted waits until url is routed: a task without the token gets
// an answer other than 404 (what it is, 401, TestLockedDownAsShipped
// checks). The ksvc is Ready when Traefik has taken its KIngress, and
// Traefik once still answered 404 (no router) for that Host right after.
func waitRouted(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		code, err := post(ctx, url, "", "")
		if err == nil && code != http.StatusNotFound {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not routed to the function within 2m: status %d, %v", url, code, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// kubectl runs the cluster's kubectl as its admin.
func (e *env) kubectl(ctx context.Context, args ...string) (string, error) {
	return e.kubectlIn(ctx, "", args...)
}

func (e *env) kubectlIn(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// nodeEnv is the environment of a Sluice process beside the cluster as
// user (cli or agent): the NATS user and its password file (an agent has
// none: it connects as its job with the team key job submit wrote), the
// S3 server and its credentials, the function token.
func (e *env) nodeEnv(t *testing.T, user string) []string {
	t.Helper()
	tok := filepath.Join(e.dir, "fn-token")
	if err := os.WriteFile(tok, []byte(e.secrets["fn-token"]), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(integration.S3Env(e.secrets["s3-access"], e.secrets["s3-secret"]),
		"SLUICE_NATS_URL="+natsURL,
		"SLUICE_S3_ENDPOINT="+s3URL, "SLUICE_S3_PATH_STYLE=true", "SLUICE_FN_TOKEN_FILE="+tok,
		// job submit writes each job's team key there, not in ~/.config.
		"SLUICE_TEAM_KEY_DIR="+filepath.Join(e.dir, "teamkeys"))
	if user == "agent" {
		return env
	}
	pw := filepath.Join(e.dir, "nats-"+user)
	if err := os.WriteFile(pw, []byte(e.secrets[user]), 0o600); err != nil {
		t.Fatal(err)
	}
	return append(env, "SLUICE_NATS_USER=sluice-"+user, "SLUICE_NATS_PASSWORD_FILE="+pw)
}

// s3Client reaches the cluster's S3 server as the test's own client.
func (e *env) s3Client(t *testing.T) *s3.Client {
	t.Helper()
	c, err := objstore.NewClient(context.Background(), objstore.Config{
		Endpoint: s3URL, PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(e.secrets["s3-access"], e.secrets["s3-secret"], ""),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fnPods counts the function's pods (of every Revision) that are not
// being deleted, and the ready ones among them; terminating counts those
// being deleted (queue-proxy drains each for 30 s before it goes).
func (e *env) fnPods(ctx context.Context, service string) (all, ready, terminating int, err error) {
	pods, err := e.kube.CoreV1().Pods(namespace).List(ctx, metav1ListFor(service))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			terminating++
			continue
		}
		all++
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return all, ready, terminating, nil
}

// waitFor polls f every interval until it returns nil or within passes.
func waitFor(t *testing.T, within, interval time.Duration, f func() error) {
	t.Helper()
	end := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("after %v: %v", within, err)
		}
		time.Sleep(interval)
	}
}

// metav1ListFor selects the objects Knative labels as service's.
func metav1ListFor(service string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + service}
}
