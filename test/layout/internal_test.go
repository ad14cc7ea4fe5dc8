package layout

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/testenv"
)

const module = "github.com/sluice-project/sluice"

// TestInternalIsLeafPlumbing: a package under internal/ imports (outside
// its tests) only other internal/ packages and wire, the contract; a
// format/ package (a public data format) only other formats.
// Composition roots live with the commands, the integration suite in
// test/.
func TestInternalIsLeafPlumbing(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./internal/...", "./format/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(l)
		n++
		pkg := strings.TrimPrefix(fields[0], module+"/")
		for _, imp := range fields[1:] {
			rel, ok := strings.CutPrefix(imp, module+"/")
			switch {
			case !ok:
			case strings.HasPrefix(pkg, "format/"):
				if !strings.HasPrefix(rel, "format/") {
					t.Errorf("%s imports %s: a format is a leaf library", pkg, rel)
				}
			case strings.HasPrefix(rel, "internal/") || rel == "wire":
			default:
				t.Errorf("%s imports %s: internal/ is leaf plumbing", pkg, rel)
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list gave %d internal packages: %s", n, out)
	}
}
