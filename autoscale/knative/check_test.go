package knative

import (
	"strings"
	"testing"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func svcWith(cc int64, ann map[string]string) *servingv1.Service {
	s := &servingv1.Service{}
	s.Spec.Template.Annotations = ann
	if cc >= 0 {
		s.Spec.Template.Spec.ContainerConcurrency = &cc
	}
	return s
}

func TestCheckService(t *testing.T) {
	good := map[string]string{
		"autoscaling.knative.dev/class":                         "kpa.autoscaling.knative.dev",
		"autoscaling.knative.dev/metric":                        "concurrency",
		"autoscaling.knative.dev/target":                        "4",
		"autoscaling.knative.dev/target-utilization-percentage": "100",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name string
		svc  *servingv1.Service
		want []string // substrings, one per problem
	}{
		{"matching", svcWith(4, good), nil},
		{"target from containerConcurrency", svcWith(4, with("autoscaling.knative.dev/target", "")), nil},
		{"default utilization 70%", svcWith(4, with("autoscaling.knative.dev/target-utilization-percentage", "")), []string{"1.43x"}},
		{"no containerConcurrency", svcWith(-1, good), []string{"containerConcurrency is 0"}},
		{"hpa class", svcWith(4, with("autoscaling.knative.dev/class", "hpa.autoscaling.knative.dev")), []string{"KPA"}},
		{"rps metric", svcWith(4, with("autoscaling.knative.dev/metric", "rps")), []string{`"rps"`}},
		{"min above max", svcWith(4, with("autoscaling.knative.dev/min-scale", "5")), nil},
	}
	cases[6].svc.Spec.Template.Annotations["autoscaling.knative.dev/max-scale"] = "3"
	cases[6].want = []string{"min-scale 5 above max-scale 3"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := CheckService(c.svc, 4)
			if len(got) != len(c.want) {
				t.Fatalf("problems = %q, want %d like %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}
