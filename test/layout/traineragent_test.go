package layout

import (
	"slices"
	"strings"
	"testing"
)

// agentFloors are the floors inside traineragent, from the ground up
// (docs/architecture.md, "Inside traineragent"): the pure rank policies,
// batch assembly and positions, and the demand signals at the bottom,
// each on its own; the reader's plain state above them; the team
// protocol above that; the agent's shell on top. fixture, the helpers
// the packages' tests share, stands beside the state.
var agentFloors = map[string]int{
	"traineragent/internal/stepplan":    0,
	"traineragent/internal/assembly":    0,
	"traineragent/internal/demand":      0,
	"traineragent/internal/readerstate": 1,
	"traineragent/internal/fixture":     1,
	"traineragent/internal/teamproto":   2,
	"traineragent":                      3,
}

// TestTrainerAgentFloors: a package of traineragent imports (outside its
// tests) only the packages of traineragent on floors below its own, never
// one beside it or above; and every package of traineragent has a floor,
// so that a new one is placed before it is used.
func TestTrainerAgentFloors(t *testing.T) {
	var seen []string
	for _, p := range listImports(t, "./traineragent/...") {
		floor, ok := agentFloors[p.pkg]
		if !ok {
			t.Errorf("%s has no floor in agentFloors: place it (and in docs/architecture.md)", p.pkg)
			continue
		}
		seen = append(seen, p.pkg)
		for _, imp := range p.imports {
			rel, ok := strings.CutPrefix(imp, module+"/")
			if !ok || rel != "traineragent" && !strings.HasPrefix(rel, "traineragent/") {
				continue
			}
			if f, ok := agentFloors[rel]; ok && f >= floor {
				t.Errorf("%s (floor %d) imports %s (floor %d): inside traineragent, imports run down only", p.pkg, floor, rel, f)
			}
		}
	}
	for pkg := range agentFloors {
		if !slices.Contains(seen, pkg) {
			t.Errorf("agentFloors names %s, which go list does not give: keep the table to the tree", pkg)
		}
	}
}
