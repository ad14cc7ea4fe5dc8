// Package knative_test checks the manifests in deploy/knative: offline
// (kustomize renders them; Knative's own defaulting and validation accept
// every Service; the controller's flags agree with the function's
// settings; no RBAC wildcard; the function cluster-local, its token from a
// Secret, its NetworkPolicy admitting only Knative's data path and the
// agents to queue-proxy's ports), and against a real kube-apiserver with
// Knative Serving's CRDs (internal/k8senv): server-side apply and dry-run,
// and the controller's ServiceAccount token doing its work and nothing
// more.
package knative_test
