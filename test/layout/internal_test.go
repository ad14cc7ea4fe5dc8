package layout

import (
	"strings"
	"testing"
)

const module = "github.com/sluice-project/sluice"

// TestInternalIsLeafPlumbing: a package under internal/ imports (outside
// its tests) only other internal/ packages and wire, the contract; a
// format/ package (a public data format) only other formats.
// Composition roots live with the commands, the integration suite in
// test/.
func TestInternalIsLeafPlumbing(t *testing.T) {
	pkgs := listImports(t, "./internal/...", "./format/...")
	for _, p := range pkgs {
		for _, imp := range p.imports {
			rel, ok := strings.CutPrefix(imp, module+"/")
			switch {
			case !ok:
			case strings.HasPrefix(p.pkg, "format/"):
				if !strings.HasPrefix(rel, "format/") {
					t.Errorf("%s imports %s: a format is a leaf library", p.pkg, rel)
				}
			case strings.HasPrefix(rel, "internal/") || rel == "wire":
			default:
				t.Errorf("%s imports %s: internal/ is leaf plumbing", p.pkg, rel)
			}
		}
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list gave %d internal packages: %v", len(pkgs), pkgs)
	}
}
