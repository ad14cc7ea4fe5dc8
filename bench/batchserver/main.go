// Command batchserver serves one fixed batch of uint8 224x224x3 images as
// `sluice agent` serves batches (GET /v1/batch, the same safetensors layout
// and metadata), as fast as it can and forever: the ceiling of a client's
// receive rate, without the agent's own work (pulling tasks, receiving the
// chunks from function replicas, assembling batches, recording its
// position).
//
//	go run ./bench/batchserver --listen 127.0.0.1:18555 --batch 32 &
//	/usr/bin/python3 bench/pytorch_bench.py throughput --url http://127.0.0.1:18555 --seconds 10
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/internal/httpserve"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18555", "address to serve on")
	n := flag.Int("batch", 32, "samples per batch")
	distinct := flag.Int64("distinct-bytes", 0, "serve the images of each batch in turn from distinct buffers of this many bytes in all, each touched once before serving (cold memory, as an agent holding a job's output serves), rather than from one buffer")
	flag.Parse()
	keys := make([]string, *n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%08d", i)
	}
	kj, err := json.Marshal(keys)
	if err != nil {
		log.Fatal(err)
	}
	tensors := []safetensors.Tensor{
		{Name: "image", DType: safetensors.U8, Shape: []int{*n, 224, 224, 3}, Data: make([]byte, *n*224*224*3)},
		{Name: "label", DType: safetensors.I64, Shape: []int{*n}, Data: make([]byte, *n*8)},
	}
	meta := map[string]string{"job": "batchserver", "epoch": "0", "step": "0", "keys": string(kj),
		"rank": "0", "world_size": "1", "last_step": "false", "position": "null"}
	head, size, err := safetensors.Header(tensors, meta)
	if err != nil {
		log.Fatal(err)
	}
	images := [][]byte{tensors[0].Data}
	if per := int64(len(tensors[0].Data)); *distinct > per {
		images = make([][]byte, *distinct/per)
		for i := range images {
			images[i] = make([]byte, per)
			for j := 0; j < len(images[i]); j += 4096 {
				images[i][j] = byte(i) // resident, as written samples are
			}
		}
	}
	var next atomic.Int64
	http.HandleFunc("GET /v1/batch", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		img := images[(next.Add(1)-1)%int64(len(images))]
		for _, b := range [][]byte{head, img, tensors[1].Data} {
			if _, err := w.Write(b); err != nil {
				return
			}
		}
	})
	log.Printf("serving %d-sample batches (%d bytes) on http://%s", *n, size, *listen)
	// The timeouts every Sluice server has (a slow or idle client holds no
	// connection for ever), no token: it serves a fixed batch on loopback.
	srv := httpserve.New(http.DefaultServeMux, httpserve.Options{})
	srv.Addr = *listen
	log.Fatal(srv.ListenAndServe())
}
