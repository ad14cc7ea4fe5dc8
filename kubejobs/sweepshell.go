package kubejobs

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-project/sluice/broker"
)

// ReconcileSweep is ReconcileJob for a SluiceSweep: it returns the action
// taken, whether the sweep may still change, and the error of the action
// or the status write.
func (r *Reconciler) ReconcileSweep(ctx context.Context, u *unstructured.Unstructured) (Action, bool, error) {
	o := SweepObject{
		Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), Generation: u.GetGeneration(),
		Deleting: u.GetDeletionTimestamp() != nil, Finalized: slices.Contains(u.GetFinalizers(), Finalizer),
	}
	if err := decodeInto(u, "spec", &o.Spec); err != nil {
		return ActNone, false, err
	}
	if err := decodeInto(u, "status", &o.Status); err != nil {
		return ActNone, false, err
	}
	var rec SweepRecord
	id, idErr := o.ID()
	if idErr == nil && (o.Finalized || o.Deleting) {
		var err error
		if rec, err = r.readSweep(ctx, o, id); err != nil {
			return ActNone, false, err
		}
	}
	action, st, active := DecideSweep(o, rec)
	var aerr error
	switch action {
	case ActAddFinalizer, ActRemoveFinalizer:
		aerr = r.setFinalizer(ctx, SweepsResource, u, action == ActAddFinalizer)
	case ActSubmit:
		if aerr = r.submitSweep(ctx, u, o, id); aerr != nil {
			st.Reason = truncate("submitting: "+aerr.Error(), 4096)
		}
	case ActDelete:
		aerr = r.deleteSweep(ctx, o, rec)
	}
	r.count(action, aerr)
	if action == ActAddFinalizer || action == ActRemoveFinalizer || o.Deleting || reflect.DeepEqual(st, o.Status) {
		return action, active, aerr
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return action, active, errors.Join(aerr, fmt.Errorf("encoding status: %w", err))
	}
	u.Object["status"] = m
	if _, err := r.opts.Dynamic.Resource(SweepsResource).Namespace(o.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return action, active, errors.Join(aerr, fmt.Errorf("writing status: %w", err))
	}
	return action, active, aerr
}

// readSweep reads sweep id and which of its jobs hold the object's keys.
func (r *Reconciler) readSweep(ctx context.Context, o SweepObject, id string) (SweepRecord, error) {
	st, err := r.opts.Broker.Sweep(ctx, id)
	if errors.Is(err, broker.ErrSweepNotFound) {
		return SweepRecord{}, nil
	}
	if err != nil {
		return SweepRecord{}, fmt.Errorf("reading sweep %s: %w", id, err)
	}
	rec := SweepRecord{Found: true, Sweep: st, Ours: make([]bool, len(st.Jobs))}
	for i, j := range st.Jobs {
		if j.Job.Spec.ID == "" {
			continue
		}
		want := agentAuth(teamKey(r.opts.Key, o.UID, j.Job.Spec.ID))
		rec.Ours[i] = subtle.ConstantTimeCompare([]byte(j.Job.AgentAuth), []byte(want)) == 1
	}
	return rec, nil
}

// submitSweep creates the Secret of the sweep's team keys (one per job,
// under the job's id) and submits the sweep, its jobs pre-warmed by
// Options.Planner.
func (r *Reconciler) submitSweep(ctx context.Context, u *unstructured.Unstructured, o SweepObject, id string) error {
	spec := o.Spec.Wire(id)
	data := map[string][]byte{}
	for _, j := range spec.Jobs() {
		data[j.ID] = teamKeyFile(teamKey(r.opts.Key, o.UID, j.ID))
	}
	if err := r.createKeySecret(ctx, u, data); err != nil {
		return err
	}
	if _, err := r.opts.Broker.SubmitSweep(ctx, spec, r.opts.Planner, func(job string) []byte { return teamKey(r.opts.Key, o.UID, job) }); err != nil {
		return err
	}
	r.log.Info("sweep submitted for its object", "sweep", id, "namespace", o.Namespace, "name", o.Name, "jobs", len(data))
	return nil
}

// deleteSweep cancels and removes the object's jobs of the sweep, then its
// record. A job not the object's is left alone.
func (r *Reconciler) deleteSweep(ctx context.Context, o SweepObject, rec SweepRecord) error {
	for i, j := range rec.Sweep.Jobs {
		if i >= len(rec.Ours) || !rec.Ours[i] {
			continue
		}
		id := j.Job.Spec.ID
		if !j.Job.State.Terminal() {
			if _, err := r.opts.Broker.Cancel(ctx, id, "SluiceSweep "+o.Namespace+"/"+o.Name+" deleted"); err != nil && !errors.Is(err, broker.ErrTransition) {
				return err
			}
		}
		if err := r.opts.Broker.Delete(ctx, id, false); err != nil && !errors.Is(err, broker.ErrJobNotFound) {
			return err
		}
	}
	if err := r.opts.Broker.DeleteSweep(ctx, rec.Sweep.Sweep.Spec.ID); err != nil && !errors.Is(err, broker.ErrSweepNotFound) {
		return err
	}
	r.log.Info("sweep cancelled and removed: its object is deleted", "sweep", rec.Sweep.Sweep.Spec.ID)
	return nil
}

// setFinalizer adds or removes Finalizer on u.
func (r *Reconciler) setFinalizer(ctx context.Context, res schema.GroupVersionResource, u *unstructured.Unstructured, add bool) error {
	fs := slices.DeleteFunc(u.GetFinalizers(), func(f string) bool { return f == Finalizer })
	if add {
		fs = append(fs, Finalizer)
	}
	u.SetFinalizers(fs)
	_, err := r.opts.Dynamic.Resource(res).Namespace(u.GetNamespace()).Update(ctx, u, metav1.UpdateOptions{})
	if !add && apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// createKeySecret creates the Secret <name>-teamkey of u with data, owned
// by u. One there already holds the same (the keys are derived).
func (r *Reconciler) createKeySecret(ctx context.Context, u *unstructured.Unstructured, data map[string][]byte) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: TeamKeySecretName(u.GetName()), Namespace: u.GetNamespace(),
			Labels: map[string]string{"app.kubernetes.io/managed-by": "sluice-kube-jobs"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), UID: u.GetUID(),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if _, err := r.opts.Core.CoreV1().Secrets(sec.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the team key Secret %s: %w", sec.Name, err)
	}
	return nil
}

// decodeInto decodes u's field (spec or status) into v; a missing one is
// left zero.
func decodeInto(u *unstructured.Unstructured, field string, v any) error {
	m, ok := u.Object[field].(map[string]any)
	if !ok {
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, v); err != nil {
		return fmt.Errorf("decoding %s: %w", field, err)
	}
	return nil
}
