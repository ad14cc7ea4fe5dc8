package dispatch

import (
	"strings"
	"testing"

	"github.com/sluice-project/sluice/wire"
)

func TestCheckPlan(t *testing.T) {
	ok := wire.DispatchPlan{Job: "j", Endpoints: []string{"http://127.0.0.1:8080", "https://fn.example/"}, PerEndpoint: 2,
		InFlight: 4, Shares: map[string]int{"a": 3, "b": 1}}
	if err := checkPlan(ok, "j"); err != nil {
		t.Errorf("a good plan: %v", err)
	}
	if err := checkPlan(wire.DispatchPlan{Job: "j"}, "j"); err != nil {
		t.Errorf("an empty plan: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*wire.DispatchPlan)
		want string
	}{
		{"another job", func(p *wire.DispatchPlan) { p.Job = "k" }, `plan of job "k"`},
		{"negative in flight", func(p *wire.DispatchPlan) { p.InFlight = -1 }, "in flight -1"},
		{"negative share", func(p *wire.DispatchPlan) { p.Shares["b"] = -2 }, `share -2 of agent "b"`},
		{"no scheme", func(p *wire.DispatchPlan) { p.Endpoints = []string{"127.0.0.1:8080"} }, `endpoint "127.0.0.1:8080"`},
		{"another scheme", func(p *wire.DispatchPlan) { p.Endpoints = []string{"nats://x:4222"} }, "want an http(s)://host URL"},
		{"too many endpoints", func(p *wire.DispatchPlan) { p.Endpoints = make([]string, maxPlanEndpoints+1) }, "endpoints, want at most"},
	} {
		p := ok
		p.Shares = map[string]int{"a": 3, "b": 1}
		c.edit(&p)
		if err := checkPlan(p, "j"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
