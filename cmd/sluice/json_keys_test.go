package main

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/cmd/sluice/internal/demo"
	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/loadtest/sweep"
	"github.com/sluice-project/sluice/loadtest/trace"
	"github.com/sluice-project/sluice/wire"
)

// fill sets every field reachable from v to a value that is not zero: a
// slice gets one element, a map one entry, a pointer a value, so that
// every field's JSON key shows, omitempty or not.
func fill(v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type().PkgPath() == "time" {
			return // Time and Duration are values in JSON
		}
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				fill(f, depth+1)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{1})
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		if k.Kind() == reflect.String {
			k.SetString("k")
		} else {
			fill(k, depth+1)
		}
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	}
}

// Every type a command prints with --json, every field filled: each key
// is snake_case, whatever a run happens to fill (the commands' own tests
// check their output as a run prints it).
func TestReportTypesSnakeCase(t *testing.T) {
	for name, v := range map[string]any{
		"demo, bench cache (summary)": &demo.Summary{},
		"bench cache":                 &cacheRun{},
		"bench ops":                   &benchReport{},
		"fn apply":                    &applyReport{},
		"plan (cache model)":          &shardcache.Prediction{},
		"plan (inputs)":               &shardcache.ModelInputs{},
		"plan (replicas)":             &replicaPlan{},
		"job submit/status/list":      &wire.Job{},
		"job status":                  &wire.JobStatus{},
		"sweep submit":                &wire.Sweep{},
		"sweep status":                &broker.SweepStatus{},
		"loadtest sweep":              &sweep.Report{},
		"loadtest trace (summary)":    &trace.Summary{},
		"loadtest cluster":            &clusterReport{},
	} {
		t.Run(name, func(t *testing.T) {
			fill(reflect.ValueOf(v), 0)
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			snakeKeys(t, string(b))
		})
	}
}

// `sluice fn apply --json` prints the report as one object.
func TestFnApplyJSON(t *testing.T) {
	dir := t.TempDir()
	tarPath, _ := imageShard(t, dir, 6, 1)
	out := filepath.Join(dir, "out.safetensors")
	code, stdout, stderr := applyCLI(t, "--pipeline", "imagenet-train", "--input", tarPath, "--output", out, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	snakeKeys(t, stdout)
	rep := decode[applyReport](t, stdout)
	if rep.Samples != 5 || rep.Failed != 1 || rep.Output != out || rep.Pipeline != "imagenet-train" || len(rep.Tensors) != 2 ||
		rep.Tensors[0].Name != "image" || !reflect.DeepEqual(rep.Tensors[0].Shape, []int{5, 224, 224, 3}) {
		t.Errorf("report %+v: want 5 samples written, 1 failed, image [5 224 224 3] and label", rep)
	}
}
