package jobspec

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/testenv"
)

// module is this module's import path.
const module = "github.com/sluice-project/sluice"

// pipelineCode are the packages of the functions' pipelines: the image,
// text and tabular ops and the pipeline that builds them.
var pipelineCode = []string{"functions/image", "functions/text", "functions/tabular", "functions/pipeline"}

// The broker, the controller, the dispatcher and the agent link no image,
// text or tabular code: checking a spec's pipeline is this package's, given
// to the broker as a SpecCheck. The test fails when one of them imports,
// directly or not, a package of pipelineCode.
func TestNoPipelineCodeBelowTheCommands(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pkgs := []string{"broker", "controller", "dispatch", "traineragent"}
	args := []string{"list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`}
	for _, p := range pkgs {
		args = append(args, "./"+p)
	}
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(pkgs) {
		t.Fatalf("go list gave %d packages, want %d:\n%s", len(lines), len(pkgs), out)
	}
	for _, l := range lines {
		fields := strings.Fields(l)
		var bad []string
		for _, dep := range fields[1:] {
			for _, c := range pipelineCode {
				if dep == module+"/"+c || strings.HasPrefix(dep, module+"/"+c+"/") {
					bad = append(bad, strings.TrimPrefix(dep, module+"/"))
				}
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s links %s: pipeline code belongs to the functions and jobspec only",
				strings.TrimPrefix(fields[0], module+"/"), strings.Join(bad, ", "))
		}
	}
}
