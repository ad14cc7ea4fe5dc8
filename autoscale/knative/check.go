package knative

import (
	"fmt"
	"math"
	"strconv"

	"knative.dev/serving/pkg/apis/autoscaling"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Knative's defaults where the template leaves a setting out
// (config-autoscaler).
const (
	defaultTargetUtilization = 70.0
	defaultTarget            = 100.0
)

// CheckService says what in the function Service would make the KPA run a
// different number of replicas than Sluice decides, with concurrency the
// requests Sluice sends per decided replica. Nil means none: the KPA's
// effective target per pod (target x utilization) equals concurrency, and
// a pod takes exactly that many requests at once.
func CheckService(svc *servingv1.Service, concurrency int) []string {
	var problems []string
	tmpl := svc.Spec.Template
	ann := tmpl.Annotations
	if c, ok := ann[autoscaling.ClassAnnotationKey]; ok && c != autoscaling.KPA {
		problems = append(problems, fmt.Sprintf("annotation %s is %q: Sluice drives the KPA (%s), the only class that scales on request concurrency and to zero",
			autoscaling.ClassAnnotationKey, c, autoscaling.KPA))
	}
	if m, ok := ann[autoscaling.MetricAnnotationKey]; ok && m != autoscaling.Concurrency {
		problems = append(problems, fmt.Sprintf("annotation %s is %q: want %q, the metric Sluice's in-flight requests drive",
			autoscaling.MetricAnnotationKey, m, autoscaling.Concurrency))
	}
	cc := 0
	if tmpl.Spec.ContainerConcurrency != nil {
		cc = int(*tmpl.Spec.ContainerConcurrency)
	}
	if cc != concurrency {
		problems = append(problems, fmt.Sprintf("containerConcurrency is %d: want %d, the controller's --replica-concurrency (a replica answers 429 beyond it)", cc, concurrency))
	}
	target := defaultTarget
	if cc > 0 {
		target = float64(cc)
	}
	if v, ok := ann[autoscaling.TargetAnnotationKey]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			problems = append(problems, fmt.Sprintf("annotation %s is %q: want a number > 0", autoscaling.TargetAnnotationKey, v))
		} else {
			target = f
		}
	}
	util := defaultTargetUtilization
	if v, ok := ann[autoscaling.TargetUtilizationPercentageKey]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 100 {
			problems = append(problems, fmt.Sprintf("annotation %s is %q: want 1..100", autoscaling.TargetUtilizationPercentageKey, v))
		} else {
			util = f
		}
	}
	if perPod := target * util / 100; math.Abs(perPod-float64(concurrency)) > 1e-9 {
		problems = append(problems, fmt.Sprintf("the KPA's target per pod is %s x %s%% = %.3g requests, Sluice sends %d per replica: the KPA would run %.2fx the replicas Sluice decides; set %s to %d and %s to 100",
			strconv.FormatFloat(target, 'g', -1, 64), strconv.FormatFloat(util, 'g', -1, 64), perPod, concurrency,
			float64(concurrency)/perPod, autoscaling.TargetAnnotationKey, concurrency, autoscaling.TargetUtilizationPercentageKey))
	}
	lo, hasLo := scaleAnnotation(ann, autoscaling.MinScaleAnnotationKey)
	hi, hasHi := scaleAnnotation(ann, autoscaling.MaxScaleAnnotationKey)
	if hasLo && hasHi && hi > 0 && lo > hi {
		problems = append(problems, fmt.Sprintf("min-scale %d above max-scale %d", lo, hi))
	}
	return problems
}

// scaleAnnotation reads an integer scale annotation; false when absent or
// not a number.
func scaleAnnotation(ann map[string]string, key string) (int, bool) {
	v, ok := ann[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, false
	}
	return n, true
}
