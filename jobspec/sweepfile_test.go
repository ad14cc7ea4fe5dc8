package jobspec

import (
	"strings"
	"testing"
)

func TestParseSweep(t *testing.T) {
	s, err := ParseSweep([]byte(`
id: lr
dataset: s3://data/ds/
pipeline: imagenet-train
batch_size: 4
epochs: 1
output_buffer_bytes: 64MiB
trainer_rate: 300
trials:
  - {name: a}
  - {name: b, seed: 3}
  - name: c
    pipeline:
      name: small
      label: {member: cls}
      ops: [decode, {op: resize, size: 16}, {op: center_crop, size: 16}, to_uint8_hwc]
`))
	if err != nil {
		t.Fatal(err)
	}
	jobs := s.Jobs()
	if len(jobs) != 3 || s.OutputBufferBytes != 64<<20 || *s.Trials[1].Seed != 3 || !strings.Contains(jobs[2].Pipeline, "center_crop") {
		t.Errorf("sweep %+v jobs %+v: want three jobs, the inline pipeline kept", s, jobs)
	}
	_, err = ParseSweep([]byte("id: x\ndataset: s3://data/ds/\npipeline: nope\nbatch_size: 4\nepochs: 1\ncount: 2\n"))
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown pipeline: %v; want it named", err)
	}
	if _, err := ParseSweep([]byte("id: x\ncuont: 2\n")); err == nil || !strings.Contains(err.Error(), "cuont") {
		t.Errorf("unknown key: %v; want it named", err)
	}
}

func TestJobFileTakesInitialReplicas(t *testing.T) {
	spec, err := Parse([]byte("id: j\ndataset: s3://d/x/\npipeline: imagenet-train\nbatch_size: 4\nepochs: 1\ninitial_replicas: 3\n"))
	if err != nil || spec.InitialReplicas != 3 {
		t.Errorf("initial_replicas: %d, %v; want 3", spec.InitialReplicas, err)
	}
	if _, err := Parse([]byte("id: j\ndataset: s3://d/x/\npipeline: imagenet-train\nbatch_size: 4\nepochs: 1\ninitial_replicas: -1\n")); err == nil || !strings.Contains(err.Error(), "initial_replicas") {
		t.Errorf("initial_replicas -1: %v; want it refused", err)
	}
}
