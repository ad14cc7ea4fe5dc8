package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// socketReader is the trainer of TestIntegrationPythonLoaderMapsTheAgentsBatches:
// it reads the agent's Unix socket with the Python client and prints one
// JSON line per batch: its epoch, keys, shape, and whether its images
// view a mapping (the memfd) rather than bytes read from a socket, and
// how many buffers its connection maps. It writes into each batch.
const socketReader = `
import json, mmap, sys
import numpy as np
import sluice

def mapped(a):
    while isinstance(a, np.ndarray):
        a = a.base
    return isinstance(a, memoryview) and isinstance(a.obj, mmap.mmap)

with sluice.Loader(sys.argv[1], prefetch=2, timeout=120) as ld:
    for batches in ld.epochs():
        for b in batches:
            img = b["image"]
            img[:, 0, 0, 0] = 7
            conn = ld._conn
            print(json.dumps({"epoch": b["__epoch__"], "keys": b["__key__"], "shape": list(img.shape),
                              "dtype": str(img.dtype), "mapped": mapped(img),
                              "buffers": len(conn._bufs) if conn is not None else 0}), flush=True)
`

// TestIntegrationPythonLoaderMapsTheAgentsBatches: a real agent serves
// `--listen-unix`, and the Python client reading unix:PATH gets every
// sample of both epochs once, each batch's tensors a view of a memfd the
// agent passed (batches of 16 64x64 crops: 192 KiB, over
// wire.AgentSocketMinFD), writable in the trainer's process, and the
// connection's buffers reused: fewer than the batches (were a buffer
// written while a batch still viewed it, keys would repeat).
func TestIntegrationPythonLoaderMapsTheAgentsBatches(t *testing.T) {
	py := pythonWith(t, "numpy")
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("sock", "train/", SmallImages(64, 4, 31))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})
	spec := imageJob("sock", d, "{\"name\": \"sock\", \"label\": {\"member\": \"cls\"}, \"ops\": [\"decode\","+
		" {\"op\": \"random_resized_crop\", \"size\": 64}, {\"op\": \"random_horizontal_flip\"}, \"to_uint8_hwc\"]}")
	spec["batch_size"], spec["epochs"] = 16, 2
	c.Submit(spec)
	sock := filepath.Join(c.Dir, "agent.sock")
	c.StartAgent("agent-sock", "sock", "--listen-unix", sock)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("the agent's socket: %v %v, want mode 0660", fi, err)
	}
	script := filepath.Join(c.Dir, "socket_reader.py")
	if err := os.WriteFile(script, []byte(socketReader), 0o644); err != nil {
		t.Fatal(err)
	}
	p := StartProcess(t, c.Dir, "socket-reader", py, []string{script, "unix:" + sock},
		[]string{"PYTHONPATH=" + filepath.Join(root, "clients", "python"), "PYTHONUNBUFFERED=1"})
	*c.procs = append(*c.procs, p)
	if err := p.Wait(jobTimeout); err != nil {
		t.Fatalf("%v\n%s", err, p.Tail(30))
	}
	if err := p.ExitErr(); err != nil {
		t.Fatalf("socket_reader.py: %v\n%s", err, p.Tail(30))
	}
	waitReleased(t, c, js, "sock", wire.JobSucceeded, ctrl)

	tr := NewTrainer()
	batches, maxBufs := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(p.Log()), "\n") {
		if strings.HasPrefix(line, "=== itest:") {
			continue // the harness's own lines
		}
		var b struct {
			Epoch   int
			Keys    []string
			Shape   []int
			Dtype   string
			Mapped  bool
			Buffers int
		}
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			t.Fatalf("socket_reader.py printed %q: %v", line, err)
		}
		batches++
		maxBufs = max(maxBufs, b.Buffers)
		if len(b.Shape) != 4 || b.Shape[0] != len(b.Keys) || b.Shape[1] != 64 || b.Shape[3] != 3 || b.Dtype != "uint8" {
			t.Errorf("batch %d: shape %v %s for %d keys, want [%d 64 64 3] uint8", batches, b.Shape, b.Dtype, len(b.Keys), len(b.Keys))
		}
		if !b.Mapped && len(b.Keys) == 16 {
			t.Errorf("batch %d of epoch %d: its images are not a view of the agent's memfd", batches, b.Epoch)
		}
		for _, k := range b.Keys {
			tr.seen[epochKey(b.Epoch, k)]++
		}
	}
	t.Logf("%d batches on the agent's unix socket, in %d buffers", batches, maxBufs)
	if maxBufs < 1 || maxBufs >= batches {
		t.Errorf("%d batches in %d buffers: want them reused", batches, maxBufs)
	}
	logReport(t, tr.Check("unix-socket", d.Keys, 2, nil, 0))
}
