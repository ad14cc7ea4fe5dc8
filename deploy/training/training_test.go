// Package training_test checks the training Job's manifests: what they
// render to, and that a real kube-apiserver accepts them. The Job running
// on a real cluster is test/e2e's TestTrainersAsPods.
package training_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluice-project/sluice/internal/k8senv"
)

// rendered is what `kubectl kustomize .` gives: the Job and the ConfigMap
// the agent and torchrun share.
func rendered(t *testing.T) (*batchv1.Job, *corev1.ConfigMap) {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	out, err := exec.Command("kubectl", "kustomize", ".").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var job *batchv1.Job
	var cm *corev1.ConfigMap
	r := utilyaml.NewYAMLReader(bufioReader(out))
	for {
		b, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Job":
			job = new(batchv1.Job)
			if err := yaml.UnmarshalStrict(b, job); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			cm = new(corev1.ConfigMap)
			if err := yaml.UnmarshalStrict(b, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	if job == nil || cm == nil {
		t.Fatalf("kustomize gave no Job or no ConfigMap:\n%s", out)
	}
	return job, cm
}

// TestTrainingJobRunsTheAgentAsASidecar: one pod per node index, the
// agent a native sidecar serving that node's ranks on a socket the
// trainer shares, with that node's credential, which the trainer's
// container cannot read; the sizes agree.
func TestTrainingJobRunsTheAgentAsASidecar(t *testing.T) {
	job, cm := rendered(t)
	spec := job.Spec.Template.Spec
	atoi := func(k string) int {
		n, err := strconv.Atoi(cm.Data[k])
		if err != nil {
			t.Fatalf("ConfigMap %s: %v", k, err)
		}
		return n
	}
	nnodes, nproc, world := atoi("NNODES"), atoi("NPROC_PER_NODE"), atoi("WORLD_SIZE")
	if world != nnodes*nproc {
		t.Errorf("WORLD_SIZE %d, want NNODES x NPROC_PER_NODE = %d", world, nnodes*nproc)
	}
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion ||
		job.Spec.Completions == nil || int(*job.Spec.Completions) != nnodes || job.Spec.Parallelism == nil || int(*job.Spec.Parallelism) != nnodes {
		t.Errorf("Job: want Indexed with completions = parallelism = NNODES %d", nnodes)
	}
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("%d init containers and %d containers, want the agent and the trainer", len(spec.InitContainers), len(spec.Containers))
	}
	agent, trainer := spec.InitContainers[0], spec.Containers[0]
	if agent.RestartPolicy == nil || *agent.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the agent is not a native sidecar (restartPolicy: Always)")
	}
	args := strings.Join(agent.Args, " ")
	for _, want := range []string{"agent", "--sidecar", "--node-rank=$(NODE_RANK)", "--nproc-per-node=$(NPROC_PER_NODE)",
		"--world-size=$(WORLD_SIZE)", "--job=$(SLUICE_JOB)", "--node-credential-file=/etc/sluice/node/$(NODE_RANK)"} {
		if !slices.Contains(agent.Args, want) {
			t.Errorf("agent args %q lack %q", args, want)
		}
	}
	// Kubernetes leaves an undefined $(VAR) as it is: each must be defined.
	for _, c := range []corev1.Container{agent, trainer} {
		defined := map[string]bool{}
		for _, e := range c.Env {
			defined[e.Name] = true
		}
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == cm.Name {
				for k := range cm.Data {
					defined[k] = true
				}
			}
		}
		for _, m := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(strings.Join(append(c.Command, c.Args...), " "), -1) {
			if !defined[m[1]] {
				t.Errorf("%s: $(%s) is not defined in its env", c.Name, m[1])
			}
		}
	}
	var socket string
	for _, a := range agent.Args {
		if p, ok := strings.CutPrefix(a, "--listen-unix="); ok {
			socket = p
		}
	}
	mounted := func(c corev1.Container, path string) string {
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(path, m.MountPath+"/") {
				return m.Name
			}
		}
		return ""
	}
	if v := mounted(agent, socket); v == "" || mounted(trainer, socket) != v {
		t.Errorf("the agent's socket %q is not on a volume both containers mount", socket)
	}
	if !strings.Contains(strings.Join(trainer.Args, " "), "unix:"+socket) {
		t.Errorf("the trainer's args %q do not name the agent's socket unix:%s", trainer.Args, socket)
	}
	creds := mounted(agent, "/etc/sluice/node/0")
	if creds == "" {
		t.Fatal("no node credentials mounted into the agent")
	}
	for _, m := range trainer.VolumeMounts {
		if m.Name == creds {
			t.Error("the trainer's container mounts the node credentials")
		}
	}
	if spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil {
		t.Error("no fsGroup: the trainer could not open the agent's 0660 socket")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the pods get a Kubernetes API token, which neither container needs")
	}
	// The functions' NetworkPolicy admits pods with this label.
	if job.Spec.Template.Labels["app.kubernetes.io/component"] != "sluice-agent" {
		t.Error("the pods lack app.kubernetes.io/component: sluice-agent")
	}
}

// TestIntegrationTrainingJobOnAPIServer: a real kube-apiserver accepts the
// manifests as they are (a server-side dry run, strict field validation).
func TestIntegrationTrainingJobOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver: skipped with -short")
	}
	rendered(t) // skips without kubectl
	env := k8senv.Start(t)
	env.Kubectl(t, "create", "namespace", "train")
	out := env.Kubectl(t, "apply", "-n", "train", "--server-side", "--dry-run=server", "--validate=strict", "-k", ".")
	for _, want := range []string{"job.batch/trainer", "service/trainer", "configmap/trainer-sluice"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %s:\n%s", want, out)
		}
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
