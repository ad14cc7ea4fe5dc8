package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/test/integration"
	"github.com/sluice-project/sluice/wire"
)

// nodeAgent starts `sluice agent` for job on node n, in that node's
// network namespace as a trainer node's agent runs (the cluster's DNS, the
// node's routes to the other nodes' pods), listening on the node's
// address for the test's ranks, which must send tok (from a file, never
// on the command line).
func (e *env) nodeAgent(t *testing.T, n int, name, job string, tok bearer.Token, extra ...string) (*integration.Process, string) {
	t.Helper()
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(e.dir, name+".token")
	if err := os.WriteFile(tokFile, []byte(tok.Reveal()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := nodeIP(n) + ":" + strconv.Itoa(integration.MustFreePort(t))
	args := append([]string{"netns", "exec", nodeNetns(n), e.sluice,
		"agent", "--job", job, "--name", name, "--listen", addr, "--agent-token-file", tokFile}, extra...)
	p := integration.StartProcess(t, e.dir, name, ip, args, e.nodeEnv(t, "agent"))
	url, err := p.Ready(2 * time.Minute)
	if err != nil {
		t.Fatalf("%v\n%s", err, p.Tail(30))
	}
	return p, url
}

// cpuWatch samples process pid's CPU time every 200 ms until it exits or
// the test ends (an agent exits right after its last 410); the func
// returned is the last sample.
func cpuWatch(t *testing.T, pid int) func() float64 {
	var mu sync.Mutex
	last := 0.0
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			c, err := processCPU(strconv.Itoa(pid))
			if err != nil {
				return
			}
			mu.Lock()
			last = c
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() float64 { mu.Lock(); defer mu.Unlock(); return last }
}

// placement records, while it runs, the node of every pod it sees that
// matches selector.
type placement struct {
	mu    sync.Mutex
	nodes map[string]string // pod -> node
	stop  context.CancelFunc
	done  chan struct{}
}

func (e *env) watchPlacement(t *testing.T, selector string) *placement {
	ctx, cancel := context.WithCancel(context.Background())
	p := &placement{nodes: map[string]string{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			pods, err := e.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err == nil {
				p.mu.Lock()
				for _, pod := range pods.Items {
					if pod.Spec.NodeName != "" {
						p.nodes[pod.Name] = pod.Spec.NodeName
					}
				}
				p.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(p.Stop)
	return p
}

// Stop ends the watch; ByNode is then what it saw: per node, its pods.
func (p *placement) Stop() { p.stop(); <-p.done }

func (p *placement) ByNode() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	by := map[string][]string{}
	for pod, node := range p.nodes {
		by[node] = append(by[node], pod)
	}
	for _, pods := range by {
		sort.Strings(pods)
	}
	return by
}

func (p *placement) String() string {
	by := p.ByNode()
	nodes := make([]string, 0, len(by))
	for n := range by {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, " %s=%d", n, len(by[n]))
	}
	return strings.TrimSpace(b.String())
}

// TestNATSRunsAMemberOnEachNode: the project's manifests spread NATS over
// the three nodes, one JetStream member on each, and Sluice's streams and
// buckets are replicated on all three.
func TestNATSRunsAMemberOnEachNode(t *testing.T) {
	e := need(t)
	ctx := context.Background()
	pods, err := e.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sluice-nats"})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]string{}
	for _, p := range pods.Items {
		nodes[p.Name] = p.Spec.NodeName
	}
	t.Logf("NATS members: %v", nodes)
	distinct := map[string]bool{}
	for _, n := range nodes {
		distinct[n] = true
	}
	if len(nodes) != 3 || len(distinct) != 3 {
		t.Fatalf("NATS members %v: want 3 on 3 nodes", nodes)
	}
	js := e.jetStream(t)
	for _, name := range []string{"SLUICE_TASKS", "KV_sluice_jobs", "KV_sluice_readers"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info := s.CachedInfo()
		peers := 0
		if info.Cluster != nil {
			peers = 1 + len(info.Cluster.Replicas)
		}
		t.Logf("stream %s: %d replicas, on %d members (leader %s)", name, info.Config.Replicas, peers, info.Cluster.Leader)
		if info.Config.Replicas != 3 || peers != 3 {
			t.Errorf("stream %s: %d replicas on %d members, want 3 on 3", name, info.Config.Replicas, peers)
		}
	}
}

// TestTrainingJobOnTwoNodes: a job read by a DDP trainer of 4 ranks on
// nodes 2 and 3 (2 ranks each), each node with its own agent in its own
// network namespace, the function's pods wherever the scheduler put them.
// Every sample of every epoch reaches one rank once, every rank takes the
// same steps, and the job succeeds; the pods' nodes are printed.
func TestTrainingJobOnTwoNodes(t *testing.T) {
	e := need(t)
	if e.nodes < 3 {
		t.Skipf("the cluster has %d nodes, this needs 3", e.nodes)
	}
	js := e.jetStream(t)
	const samples, shards, epochs, world = 960, 24, 2, 4
	d := e.dataset(t, "nodes-"+e.suffix+"/", samples, shards)
	id := "nodes-" + e.suffix
	fnPods := e.watchPlacement(t, "serving.knative.dev/service="+fnService)
	start := time.Now()
	e.submit(t, map[string]any{"id": id, "dataset": d.URL(), "pipeline": "imagenet-eval",
		"batch_size": 16, "epochs": epochs, "seed": 7, "max_replicas": 3})
	ws := "--world-size=" + strconv.Itoa(world)
	agents := map[int]*integration.Process{}
	urls := map[int]string{}
	agentCPU := map[int]func() float64{}
	tok, err := bearer.Random()
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{2, 3} {
		ranks := fmt.Sprintf("--ranks=%d,%d", 2*i, 2*i+1)
		agents[n], urls[n] = e.nodeAgent(t, n, fmt.Sprintf("agent-node%d-%s", n, id), id, tok, ws, ranks)
		agentCPU[n] = cpuWatch(t, agents[n].Pid())
	}
	tr := integration.NewTrainer()
	tr.Authorize(tok)
	ranks := integration.NewTeamRanks(t, tr, world, func(r int) string { return urls[2+r/2] })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := ranks.Run(ctx); err != nil {
		t.Fatalf("%v\nnode 2's agent:\n%s\nnode 3's agent:\n%s", err, agents[2].Tail(20), agents[3].Tail(20))
	}
	took := time.Since(start)
	fnPods.Stop()
	e.waitJob(t, js, id, wire.JobSucceeded, 2*time.Minute)
	ranks.CheckSteps(t, epochs)
	r := tr.Check(id, d.Keys, epochs, d.Corrupt, took)
	t.Log(r.Line())
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	by := fnPods.ByNode()
	if len(by) == 0 {
		t.Fatal("no function pod seen")
	}
	// Each agent reached a function pod on another node than its own
	// unless every pod ran on its node; with two trainer nodes, at least
	// one of them did.
	trainerNodes := []string{nodeNetns(2), nodeNetns(3)}
	across := 0
	for node, pods := range by {
		for _, tn := range trainerNodes {
			if node != tn {
				across += len(pods)
			}
		}
	}
	if across == 0 {
		t.Errorf("function pods %v: none on another node than a trainer's", by)
	}
	cpu := map[int]float64{2: agentCPU[2](), 3: agentCPU[3]()}
	gb := float64(tr.Bytes()) / 1e9
	t.Logf("figures: scenario=two-nodes ranks=%d delivered=%d lost=%d duplicates=%d seconds=%.1f fn_pods_by_node=[%s] "+
		"agent_cpu_s node2=%.2f node3=%.2f batches_gb=%.3f agent_cpu_s_per_gb=%.2f",
		world, r.Delivered, r.Lost, r.Duplicates, r.Seconds, fnPods, cpu[2], cpu[3], gb, (cpu[2]+cpu[3])/gb)
	for node, pods := range by {
		if !slices.Contains(trainerNodes, node) {
			t.Logf("function pods on %s, a node with no trainer: %v", node, pods)
		}
	}
}

// cutNode isolates worker node n: its end of its one link (to node 1)
// drops every packet both ways, so the rest of the cluster sees it go
// silent, as a machine powered off or a cut cable would (no reset, no
// close). heal undoes it; the test's cleanup heals it too.
func (e *env) cutNode(t *testing.T, n int) (heal func()) {
	t.Helper()
	rules := [][]string{{"INPUT", "-i"}, {"OUTPUT", "-o"}, {"FORWARD", "-i"}, {"FORWARD", "-o"}}
	ipt := func(op string, r []string) error {
		out, err := exec.Command("ip", "netns", "exec", nodeNetns(n), "iptables", op, r[0], r[1], "uplink", "-j", "DROP").CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables %s %v on node %d: %w: %s", op, r, n, err, out)
		}
		return nil
	}
	for _, r := range rules {
		if err := ipt("-I", r); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			for _, r := range rules {
				if err := ipt("-D", r); err != nil {
					t.Error(err)
				}
			}
		})
	}
	t.Cleanup(heal)
	return heal
}

// workerWithFunction is the worker node (2 or 3) that runs a ready function pod, and
// its pods, waiting for one.
func (e *env) workerWithFunction(t *testing.T) (int, []string) {
	t.Helper()
	var node int
	var pods []string
	waitFor(t, 2*time.Minute, 200*time.Millisecond, func() error {
		list, err := e.kube.CoreV1().Pods(namespace).List(context.Background(), metav1ListFor(fnService))
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
				continue
			}
			for n := 2; n <= 3; n++ {
				if p.Spec.NodeName == nodeNetns(n) && (node == 0 || node == n) {
					node = n
					pods = append(pods, p.Name)
				}
			}
		}
		if node == 0 {
			return fmt.Errorf("no running function pod on a worker node")
		}
		return nil
	})
	return node, pods
}

// progress watches a trainer's samples from a moment on: when the first
// sample came after it, and the longest time between two (the first
// counted from the moment).
type progress struct {
	mu         sync.Mutex
	from, last time.Time
	first      time.Duration // to the first sample after from; -1: none yet
	longest    time.Duration
	samples    int
	stop       chan struct{}
	done       chan struct{}
}

func watchProgress(samples func() int) *progress {
	p := &progress{from: time.Now(), first: -1, samples: samples(), stop: make(chan struct{}), done: make(chan struct{})}
	p.last = p.from
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			now, n := time.Now(), samples()
			p.mu.Lock()
			if n > p.samples {
				if gap := now.Sub(p.last); gap > p.longest {
					p.longest = gap
				}
				if p.first < 0 {
					p.first = now.Sub(p.from)
				}
				p.samples, p.last = n, now
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// Stop ends the watch at the trainer's last batch.
func (p *progress) Stop() (first, longest time.Duration) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first, p.longest
}

// nodeCut runs an image job whose trainer (on node 1) steps at a GPU's
// pace, cuts off the worker node running a function pod mid-job (a NATS
// member with it), and heals it after cutFor (0: only after the job, as
// a node lost for good). Every sample comes once and the job succeeds;
// it reports when the trainer got a batch again, its longest wait, and
// when Kubernetes replaced the node's function pods.
func (e *env) nodeCut(t *testing.T, scenario string, cutFor time.Duration) {
	if e.nodes < 3 {
		t.Skipf("the cluster has %d nodes, this needs 3", e.nodes)
	}
	js := e.jetStream(t)
	d := e.dataset(t, scenario+"-"+e.suffix+"/", 3200, 32)
	j := e.startPacedJob(t, scenario, d, 2, 2, func() time.Duration { return 200 * time.Millisecond })
	fnPods := e.watchPlacement(t, "serving.knative.dev/service="+fnService)
	j.waitSamples(t, 480)
	victim, pods := e.workerWithFunction(t)
	name := nodeNetns(victim)
	before := fnPods.ByNode()
	heal := e.cutNode(t, victim)
	cutAt := time.Now()
	// However the test ends, the node comes back whole for the scenarios
	// after it.
	t.Cleanup(func() { heal(); e.waitNodeBack(t, name) })
	watch := watchProgress(j.trainer.Samples)
	t.Logf("cut off node %s at %d samples: its function pods %v", name, j.trainer.Samples(), pods)

	// Kubernetes' view while the job runs: the node NotReady, and a
	// function pod ready on another worker after the cut (a replacement,
	// or one more).
	var mu sync.Mutex
	var notReady, replaced time.Duration
	jobDone, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for time.Since(cutAt) < 4*time.Minute {
			mu.Lock()
			enough := notReady > 0 && replaced > 0
			mu.Unlock()
			select {
			case <-jobDone:
				return
			default:
			}
			if enough {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			n, nerr := e.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			list, perr := e.kube.CoreV1().Pods(namespace).List(ctx, metav1ListFor(fnService))
			cancel()
			mu.Lock()
			if nerr == nil && notReady == 0 {
				for _, c := range n.Status.Conditions {
					if c.Type == "Ready" && c.Status != "True" {
						notReady = time.Since(cutAt)
					}
				}
			}
			if perr == nil && replaced == 0 {
				for _, p := range list.Items {
					ready := false
					for _, c := range p.Status.Conditions {
						ready = ready || (c.Type == "Ready" && c.Status == "True")
					}
					if ready && p.Spec.NodeName != name && p.CreationTimestamp.After(cutAt) && p.DeletionTimestamp == nil {
						replaced = time.Since(cutAt)
					}
				}
			}
			mu.Unlock()
			time.Sleep(250 * time.Millisecond)
		}
	}()
	if cutFor > 0 {
		time.Sleep(cutFor)
		heal()
	}
	r := j.finish(t, e, js)
	first, longest := watch.Stop()
	close(jobDone)
	<-watched
	heal()
	fnPods.Stop()
	t.Logf("function pods by node before the cut %v; over the job [%s]", before, fnPods)
	t.Logf("figures: scenario=%s node=%s cut_s=%.0f delivered=%d lost=%d duplicates=%d seconds=%.1f first_batch_after_cut_s=%.2f "+
		"longest_wait_s=%.2f node_not_ready_s=%.1f fn_pod_replaced_s=%.1f",
		scenario, name, cutFor.Seconds(), r.Delivered, r.Lost, r.Duplicates, r.Seconds, first.Seconds(), longest.Seconds(),
		notReady.Seconds(), replaced.Seconds())
	if longest > time.Minute {
		t.Errorf("the trainer waited %v for a batch after the cut: want progress again within 60s", longest)
	}
}

// waitNodeBack waits for node name to be Ready again, NATS to run its
// three members, and every peer of Sluice's task stream to be current.
func (e *env) waitNodeBack(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	waitFor(t, 3*time.Minute, time.Second, func() error {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready again", name)
	})
	if _, err := e.kubectl(ctx, "-n", namespace, "rollout", "status", "statefulset/sluice-nats", "--timeout=180s"); err != nil {
		t.Fatal(err)
	}
	js := e.jetStream(t)
	waitFor(t, 2*time.Minute, time.Second, func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "SLUICE_TASKS")
		if err != nil {
			return err
		}
		c := s.CachedInfo().Cluster
		if c == nil || c.Leader == "" || len(c.Replicas) != 2 {
			return fmt.Errorf("SLUICE_TASKS: cluster %+v, want a leader and 2 replicas", c)
		}
		for _, p := range c.Replicas {
			if !p.Current || p.Offline {
				return fmt.Errorf("SLUICE_TASKS: peer %s current %v offline %v", p.Name, p.Current, p.Offline)
			}
		}
		return nil
	})
	t.Logf("node %s back, NATS whole, %.0fs after the job", name, time.Since(start).Seconds())
}

// TestWorkerNodeLostMidJob: a worker node with a function pod and a NATS
// member goes silent mid-job and stays so: the job goes on on the other
// worker within 60 s, loses and repeats nothing, and Kubernetes puts the
// lost function pod's replacement on the other worker.
func TestWorkerNodeLostMidJob(t *testing.T) {
	e := need(t)
	e.nodeCut(t, "node-lost", 0)
}

// TestWorkerNodePartitionedFor20s: a worker node cut off for 20 s and back
// (a partition, not a crash): nothing repeated, nothing wedged.
func TestWorkerNodePartitionedFor20s(t *testing.T) {
	e := need(t)
	e.nodeCut(t, "node-partition", 20*time.Second)
}
