package layout

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/testenv"
)

// pkgImports is a package of the module, relative to the module, and the
// import paths of its non-test files, as go list gives them.
type pkgImports struct {
	pkg     string
	imports []string
}

// listImports runs go list in the module's root over patterns.
func listImports(t *testing.T, patterns ...string) []pkgImports {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, patterns...)
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkgImports
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(l)
		p := pkgImports{pkg: strings.TrimPrefix(fields[0], module+"/")}
		p.imports = fields[1:]
		pkgs = append(pkgs, p)
	}
	return pkgs
}
