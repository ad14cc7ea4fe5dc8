package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// TestBenchPyTorch is the Python client's benchmark, run on demand:
//
//	SLUICE_BENCH=1 go test -count=1 -run TestBenchPyTorch -v -timeout 30m ./test/integration/
//
// on the real processes (nats-server, versitygw, `sluice controller` with
// the turbojpeg build's replicas, `sluice agent`) and bench/pytorch_bench.py:
//
//  1. throughput: the job's output (uint8 224x224x3 crops) is produced
//     into the agent's memory first (its prefetch and the job's output
//     buffer hold the whole job: 3 GB); then sluice.Loader reads
//     it all from the agent as fast as it can: MB/s, samples/s, the
//     client's CPU.
//  2. side by side on the same ImageNet-like JPEGs and the same cores,
//     samples/s reaching a training loop with a fixed simulated GPU step:
//     Sluice (the spec from_torchvision makes of RandomResizedCrop(224),
//     RandomHorizontalFlip(), ToTensor(), Normalize(...), so float32
//     output; and imagenet-train's uint8 output, normalised on the GPU)
//     against torch's DataLoader over torchvision's ImageFolder with those
//     transforms and num_workers=2.
//
// SLUICE_BENCH_ROUNDS (1) repeats part 2, SLUICE_BENCH_BATCH (32) sets
// part 1's batch size, SLUICE_BENCH_AGENT_ARGS
// its agent's extra flags (e.g. "--log-level info"), SLUICE_BENCH_SAMPLES
// (6000) part 2's images, SLUICE_BENCH_STEP_MS (10) its step,
// SLUICE_BENCH_PARTS ("throughput,side") the parts run.
func TestBenchPyTorch(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("a benchmark: run with SLUICE_BENCH=1")
	}
	py := pythonWithTorch(t)
	bins := binaries(t)
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	turbo := filepath.Join(binDir, "sluice-turbo")
	if err := goCmd(context.Background(), root, "build", "-tags", "turbojpeg", "-o", turbo, "./cmd/sluice"); err != nil {
		t.Fatal(err)
	}
	bins.Sluice = turbo
	c := StartCluster(t, bins, ClusterOptions{})
	_, js := c.JetStream()
	c.StartController("controller", ControllerOptions{MaxReplicas: 2})
	script := filepath.Join(root, "bench", "pytorch_bench.py")
	parts := envOr("SLUICE_BENCH_PARTS", "throughput,side")
	stepMS := envOr("SLUICE_BENCH_STEP_MS", "10")
	samples, err := strconv.Atoi(envOr("SLUICE_BENCH_SAMPLES", "6000"))
	if err != nil {
		t.Fatal(err)
	}

	if strings.Contains(parts, "throughput") {
		// Small sources (230-260 px) so that producing 3 GB takes
		// seconds; the client sees 224x224x3 crops either way. Four
		// epochs, 3 GB: the agent holds it all in memory.
		o := synth.ImageOptions{Samples: 5000, Shards: 16, Seed: 3, MinSide: 230, MaxSide: 260, Quality: 90, Classes: 100}
		d := c.UploadImages("tput", "train/", o)
		const epochs = 4
		batch, err := strconv.Atoi(envOr("SLUICE_BENCH_BATCH", "32"))
		if err != nil {
			t.Fatal(err)
		}
		spec := Spec{"id": "tput", "dataset": d.URL(), "pipeline": "imagenet-train", "batch_size": batch,
			"epochs": epochs, "seed": 1, "max_replicas": 2, "output_buffer_bytes": 16 << 30}
		c.Submit(spec)
		total := len(d.Keys) * epochs
		// The agent takes tasks while its prefetch has room: room for the
		// whole job, so that the loader reads what is already produced.
		args := append([]string{"--prefetch", strconv.Itoa(total), "--world-size", "1"}, strings.Fields(os.Getenv("SLUICE_BENCH_AGENT_ARGS"))...)
		agent := c.StartAgent("agent-tput", "tput", args...)
		want := int64(total) * 224 * 224 * 3
		began := time.Now()
		waitAgentHolds(t, agent.URL, int64(total), 10*time.Minute)
		t.Logf("produced %d samples (%.1f GB) into the agent in %.1fs", total, float64(want)/1e9, time.Since(began).Seconds())
		cpu0 := procCPUSeconds(t, agent.Pid())
		r := runBench(t, py, script, "throughput", "--url", agent.URL, "--warmup-samples", strconv.Itoa(2*batch))
		cpu := procCPUSeconds(t, agent.Pid()) - cpu0
		t.Logf("throughput: %s", r)
		c.WaitJobState(js, "tput", wire.JobSucceeded, time.Minute)

		// The same client against bench/batchserver (the same batches
		// served as fast as Go can, no agent work), in the same run.
		bs := filepath.Join(binDir, "batchserver")
		if err := goCmd(context.Background(), root, "build", "-o", bs, "./bench/batchserver"); err != nil {
			t.Fatal(err)
		}
		// Served from one warm buffer, and from distinct buffers as large
		// as the job's output (cold memory, as the agent serves).
		var ra struct {
			MBPerS       float64 `json:"mb_per_s"`
			TotalSamples int64   `json:"total_samples"`
		}
		if json.Unmarshal([]byte(r), &ra) != nil {
			t.Fatalf("throughput report %q", r)
		}
		mbps, coreSPerGB := map[string]float64{}, map[string]float64{}
		for _, serve := range []struct{ name, args string }{{"warm", ""}, {"cold", "--distinct-bytes " + strconv.FormatInt(want, 10)}} {
			addr := freeLoopbackAddr(t)
			srv := exec.Command(bs, append([]string{"--listen", addr, "--batch", strconv.Itoa(batch)}, strings.Fields(serve.args)...)...)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			waitHTTP(t, "http://"+addr+"/v1/batch", 60*time.Second)
			srvCPU0 := procCPUSeconds(t, srv.Process.Pid)
			rb := runBench(t, py, script, "throughput", "--url", "http://"+addr, "--seconds", "8", "--warmup-s", "1")
			srvCPU := procCPUSeconds(t, srv.Process.Pid) - srvCPU0
			_ = srv.Process.Kill()
			_ = srv.Wait()
			t.Logf("throughput from bench/batchserver (%s): %s", serve.name, rb)
			var rbs struct {
				MBPerS       float64 `json:"mb_per_s"`
				TotalSamples int64   `json:"total_samples"`
			}
			if json.Unmarshal([]byte(rb), &rbs) != nil || rbs.MBPerS == 0 {
				t.Fatalf("throughput report %q", rb)
			}
			mbps[serve.name] = rbs.MBPerS
			coreSPerGB[serve.name] = srvCPU / (float64(rbs.TotalSamples) * (224*224*3 + 8) / 1e9)
		}
		// The agent's CPU covers the whole read: per GB of all of it.
		gb := float64(ra.TotalSamples) * (224*224*3 + 8) / 1e9
		t.Logf("figures: agent %.0f MB/s, batchserver %.0f MB/s warm (%.2fx), %.0f MB/s cold (%.2fx); agent %.2f core-seconds for %.2f GB: %.3f core-s/GB, batchserver %.3f warm, %.3f cold (batch %d)",
			ra.MBPerS, mbps["warm"], ra.MBPerS/mbps["warm"], mbps["cold"], ra.MBPerS/mbps["cold"], cpu, gb, cpu/gb, coreSPerGB["warm"], coreSPerGB["cold"], batch)
	}

	if strings.Contains(parts, "side") {
		// bench/genimages's images: ImageNet-like, 300-800 px, quality 90.
		o := synth.ImageOptions{Samples: samples, Shards: 8, Seed: 1, MinSide: 300, MaxSide: 800, Quality: 90, Classes: 100}
		shards, err := synth.Images(o)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := synth.Upload(ctx, c.S3.Client(t), "side", "train/", shards); err != nil {
			t.Fatal(err)
		}
		folder := filepath.Join(c.Dir, "imagefolder")
		writeImageFolder(t, folder, shards)
		spec, err := exec.Command(py, script, "sluice", "--print-spec").Output()
		if err != nil {
			t.Fatalf("from_torchvision: %v", err)
		}
		t.Logf("the transforms' Sluice spec (from_torchvision):\n%s", spec)
		rounds, err := strconv.Atoi(envOr("SLUICE_BENCH_ROUNDS", "1"))
		if err != nil {
			t.Fatal(err)
		}
		for round := 1; round <= rounds; round++ {
			benchSide(t, c, js, py, script, string(spec), folder, stepMS, samples, round)
		}
	}
}

// benchSide runs part 2's three loops once, one after the other.
func benchSide(t *testing.T, c *Cluster, js jetstream.JetStream, py, script, spec, folder, stepMS string, samples, round int) {
	rows := map[string]string{}
	for _, run := range []struct{ name, pipeline string }{
		{"sluice-f32", spec},
		{"sluice-u8", "imagenet-train"},
	} {
		job := fmt.Sprintf("%s-%d", run.name, round)
		c.Submit(Spec{"id": job, "dataset": "s3://side/train/", "pipeline": run.pipeline, "batch_size": 32,
			"epochs": 1, "seed": 1, "max_replicas": 2})
		agent := c.StartAgent("agent-"+job, job)
		rows[run.name] = runBench(t, py, script, "sluice", "--url", agent.URL, "--step-ms", stepMS, "--warmup-samples", strconv.Itoa(samples/10))
		t.Logf("round %d, %s: %s", round, run.name, rows[run.name])
		c.WaitJobState(js, job, wire.JobSucceeded, time.Minute)
		testenv.CheckFor(t, time.Minute, 200*time.Millisecond, func() error {
			if pids := c.Replicas(); len(pids) > 0 {
				return fmt.Errorf("replicas still running: %v", pids)
			}
			return nil
		})
	}
	rows["dataloader"] = runBench(t, py, script, "dataloader", "--dir", folder, "--step-ms", stepMS,
		"--workers", "2", "--batch-size", "32", "--warmup-samples", strconv.Itoa(samples/10))
	t.Logf("round %d, dataloader: %s", round, rows["dataloader"])
	ratio := func(name string) float64 {
		var a, b struct {
			PerS float64 `json:"samples_per_s"`
		}
		_ = json.Unmarshal([]byte(rows[name]), &a)
		_ = json.Unmarshal([]byte(rows["dataloader"]), &b)
		return a.PerS / max(b.PerS, 1e-9)
	}
	t.Logf("round %d: samples/s against the DataLoader: sluice-f32 %.2fx, sluice-u8 %.2fx", round, ratio("sluice-f32"), ratio("sluice-u8"))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// runBench runs bench/pytorch_bench.py and returns its JSON line.
// procCPUSeconds is the user and system CPU time of process pid so far
// (/proc/PID/stat, in clock ticks of 1/100 s).
func procCPUSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name (in parentheses, which may hold spaces).
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return (utime + stime) / 100
}

// freeLoopbackAddr is a loopback address with a port free now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitHTTP waits until url answers.
func waitHTTP(t *testing.T, url string, within time.Duration) {
	t.Helper()
	testenv.CheckFor(t, within, 50*time.Millisecond, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	})
}

func runBench(t *testing.T, py, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command(py, append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pytorch_bench.py %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// waitAgentHolds waits until the agent at base has received want samples
// from the functions (its /v1/stats samples_arrived): with a prefetch of
// the whole job, all of its output is then in the agent's memory.
func waitAgentHolds(t *testing.T, base string, want int64, within time.Duration) {
	t.Helper()
	testenv.CheckFor(t, within, 500*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/stats", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var st struct {
			Arrived int64 `json:"samples_arrived"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return fmt.Errorf("agent stats: %s: %w", resp.Status, err)
		}
		if st.Arrived < want {
			return fmt.Errorf("the agent received %d samples, want %d", st.Arrived, want)
		}
		return nil
	})
}

// writeImageFolder writes the shards' images as torchvision's ImageFolder
// reads them: dir/<class>/<key>.jpg, the same bytes.
func writeImageFolder(t *testing.T, dir string, shards []synth.Shard) {
	t.Helper()
	for _, s := range shards {
		r := wds.NewReader(bytes.NewReader(s.Data), 64<<20)
		for {
			smp, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			cls := strings.TrimSpace(string(smp.Files["cls"]))
			sub := filepath.Join(dir, "c"+cls)
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sub, smp.Key+".jpg"), smp.Files["jpg"], 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
