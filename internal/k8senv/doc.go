// Package k8senv starts a real Kubernetes API for tests: etcd and
// kube-apiserver processes on loopback, with RBAC authorization, token
// authentication, ServiceAccount tokens and Knative Serving's CRDs
// installed. No kubelet, scheduler or Knative controller runs: objects are
// stored, validated against their schemas and authorized, and a test plays
// any controller it needs by writing status itself.
//
// The binaries are built from the Go module proxy by
// .ci/k8s-testbin/build.sh (which .ci/deps.sh runs) into a cache outside
// the repository, ~/.cache/sluice/k8s-testbin/<version> or
// $SLUICE_K8S_TESTBIN. Without them a test fails under CI (CI=true) and is
// skipped elsewhere, saying how to build them. kubectl must be on PATH.
package k8senv
