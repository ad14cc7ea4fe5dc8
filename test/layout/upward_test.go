package layout

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/testenv"
)

// top are the floors above the product: the one binary, the load tests,
// the benchmarks and the test tree. They compose product packages; no
// product package imports them.
var top = []string{"cmd/", "loadtest/", "bench/", "test/"}

func isTop(rel string) bool {
	for _, p := range top {
		if strings.HasPrefix(rel+"/", p) {
			return true
		}
	}
	return false
}

// TestNoUpwardImports: no product package (outside its tests) imports
// the commands, the load tests, the benchmarks or the test tree.
func TestNoUpwardImports(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	product := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(l)
		pkg := strings.TrimPrefix(fields[0], module+"/")
		if isTop(pkg) {
			continue
		}
		product++
		for _, imp := range fields[1:] {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok && isTop(rel) {
				t.Errorf("%s imports %s: product packages do not import the floors that compose them", pkg, rel)
			}
		}
	}
	if product < 20 {
		t.Fatalf("go list gave %d product packages: %s", product, out)
	}
}
