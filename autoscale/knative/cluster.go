package knative

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/serving/pkg/apis/autoscaling"
	"knative.dev/serving/pkg/apis/serving"
)

// Sync reads the Service (its address, scale bounds and settings) and the
// ready pods of its Revisions. The first call also checks the Service's
// settings against Options.Concurrency and logs what would make the KPA
// disagree with Sluice (CheckService), again whenever its generation
// changes.
func (a *Actuator) Sync(ctx context.Context) error {
	ns, name := a.opts.Namespace, a.opts.Service
	svc, err := a.client.Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		a.m.syncErrors.Inc()
		return fmt.Errorf("reading knative service %s/%s: %w", ns, name, err)
	}
	revs, err := a.client.Revisions(ns).List(ctx, metav1.ListOptions{LabelSelector: serving.ServiceLabelKey + "=" + name})
	if err != nil {
		a.m.syncErrors.Inc()
		return fmt.Errorf("listing revisions of knative service %s/%s: %w", ns, name, err)
	}
	// Pods of an older Revision still serve while traffic moves to the
	// new one: count them all. A Revision without traffic is at zero.
	ready := 0
	for _, r := range revs.Items {
		if r.Status.ActualReplicas != nil {
			ready += int(*r.Status.ActualReplicas)
		}
	}
	url := a.opts.URL
	if url == "" {
		switch {
		case svc.Status.Address != nil && svc.Status.Address.URL != nil:
			url = svc.Status.Address.URL.String()
		case svc.Status.URL != nil:
			url = svc.Status.URL.String()
		}
	}
	ann := svc.Spec.Template.Annotations
	lo, _ := scaleAnnotation(ann, autoscaling.MinScaleAnnotationKey)
	hi, _ := scaleAnnotation(ann, autoscaling.MaxScaleAnnotationKey)

	var problems []string
	a.mu.Lock()
	if a.warned != svc.Generation && !a.opts.KPAAlone {
		a.warned = svc.Generation
		problems = CheckService(svc, a.opts.Concurrency)
	}
	if url == "" && a.url == "" && !a.synced {
		a.log.Warn("the function Service has no address yet (not ready?); tasks wait until it has")
	}
	a.ready, a.revisions, a.url = ready, len(revs.Items), url
	a.scale = scaleBounds{min: lo, max: hi}
	a.synced = true
	a.mu.Unlock()
	a.m.ready.Set(float64(ready))
	a.m.revisions.Set(float64(len(revs.Items)))
	for _, p := range problems {
		a.log.Warn("function Service setting", "problem", p)
	}
	return nil
}

// patchBounds merge-patches the template's min-scale and max-scale (a
// max of 0 is left out: no limit, the Service's own).
func (a *Actuator) patchBounds(ctx context.Context, b scaleBounds) error {
	ann := map[string]string{autoscaling.MinScaleAnnotationKey: strconv.Itoa(b.min)}
	if b.max > 0 {
		ann[autoscaling.MaxScaleAnnotationKey] = strconv.Itoa(b.max)
	}
	patch, err := json.Marshal(map[string]any{
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": ann}}},
	})
	if err != nil {
		return fmt.Errorf("encoding scale patch: %w", err)
	}
	ns, name := a.opts.Namespace, a.opts.Service
	if _, err := a.client.Services(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{
		FieldManager: "sluice-controller",
	}); err != nil {
		return fmt.Errorf("patching scale bounds of knative service %s/%s (%s): %w", ns, name, strings.TrimSpace(string(patch)), err)
	}
	return nil
}
