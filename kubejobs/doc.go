// Package kubejobs runs Sluice jobs from Kubernetes objects: a SluiceJob
// (group sluice.dev, v1alpha1, namespaced; the CRD is in
// deploy/knative/kube-jobs) is reconciled into the job store
// in NATS, which stays the source of truth for the controller and the
// agents; the object is the user's handle on it, so that GitOps tools
// apply jobs, RBAC decides who submits in which namespace and `kubectl
// get sluicejobs` shows them. Jobs submitted with the CLI go on as before.
//
// An object's job id is <namespace>_<name> (ObjectID): the CRD allows
// neither "_" nor "." in a name, and no namespace holds "_", so two
// objects never share an id; one longer than 64 characters is Failed with
// the reason. A job of that id submitted by other means (the CLI) is left
// alone: the object shows Failed, naming the collision.
//
// Each job gets a team key (the agents' NATS password is derived from
// it): HMAC-SHA256 of the object's uid and job id under the reconciler's
// key (Options.Key), written to the Secret <name>-teamkey in the object's
// namespace, owned by the object, under the key "teamkey". The job record
// holds only the password's hash, which also tells the reconciler that a
// record is its object's (JobRecord.Ours). The reconciler may create
// Secrets but never reads one; no key is in an object's spec or status,
// or in a log line.
//
// DecideJob, a pure function of the object and the record, says what to
// do (add the finalizer, submit, cancel, delete, remove the finalizer)
// and what the status is; Reconciler is the shell: a dynamic informer,
// a work queue, the broker and the Kubernetes clients. An active job's
// status is read again every Options.Poll (2 s). Deleting an object
// cancels its job if it still runs, removes it from the job store and
// only then lets the object go (Finalizer).
//
// A SluiceSweep is the same for a sweep (DecideSweep): its id is
// <namespace>_<name> (at most 60 characters: its jobs add "-<index>"),
// its jobs' team keys are in one Secret <name>-teamkey under each job's
// id, its status sums its jobs up, and deleting it cancels and removes
// its jobs and the sweep's record.
package kubejobs
