package jobspec_test

import (
	"fmt"
	"log"

	"github.com/sluice-project/sluice/jobspec"
)

func ExampleParse() {
	spec, err := jobspec.Parse([]byte(`
id: flowers-01
dataset: s3://datasets/flowers/train/
pipeline:
  name: flowers-train
  label: {member: cls}
  ops:
    - decode
    - {op: random_resized_crop, size: 160}
    - random_horizontal_flip
    - to_uint8_hwc
batch_size: 64
epochs: 10
seed: 7
max_replicas: 8
readers: [rank0, rank1]
output_buffer_bytes: 512MiB
`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(spec.ID, spec.Epochs, spec.Readers, spec.OutputBufferBytes)
	fmt.Print(spec.Pipeline)

	_, err = jobspec.Parse([]byte("id: x\ndataset: s3://d/p/\npipeline: imagenet-train\nbatch_size: 0\nepoch: 3\n"))
	fmt.Println(err)
	// Output:
	// flowers-01 10 [rank0 rank1] 536870912
	// name: flowers-train
	// label: {member: cls}
	// ops:
	//   - decode
	//   - {op: random_resized_crop, size: 160}
	//   - random_horizontal_flip
	//   - to_uint8_hwc
	// invalid job spec "x" (3 problems):
	//   line 4: batch_size: 0: want 1..65536
	//   line 5: unknown key "epoch": did you mean "epochs"?
	//   epochs: not set (0: want 1..10000)
}
