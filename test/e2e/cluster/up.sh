#!/usr/bin/env bash
# Starts a real three-node Kubernetes v1.34.2 with Knative Serving v0.42.2 and Traefik (its
# KIngress), each node in a network namespace of its own, from what build.sh put in the cache.
#
# Usage: up.sh     (as root; down.sh stops it)
#   SLUICE_E2E_CACHE  the build cache (default ~/.cache/sluice/e2e)
#   SLUICE_E2E_STATE  where the cluster keeps its state, logs and kubeconfig
#                     (default /var/lib/sluice-e2e; wiped at each start)
#
# Node 1 (namespace sluice-e2e) runs the control plane and the cluster's own pods (it is
# tainted: see below); nodes 2 and 3 (sluice-e2e-2, sluice-e2e-3) are the workers. Node N's address is 10.(87+N).0.1 on its bridge cni0, its pods
# 10.(87+N).0.0/16. Nodes 2 and 3 each have one link to node 1 (a veth pair, 10.87.N.0/24) and
# routes to the other nodes' pods through it: node 1 is the network between them. No namespace
# has an uplink or a default route: nothing in them reaches beyond them, and nothing outside
# reaches in. Every process runs inside them; node N's pods live under the cgroup /sluice-e2e
# (node 1) or /sluice-e2e-N, so down.sh kills exactly what this started.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SLUICE_E2E_CACHE:-$HOME/.cache/sluice/e2e}
state=${SLUICE_E2E_STATE:-/var/lib/sluice-e2e}
bin=$cache/bin
netns=sluice-e2e
node=sluice-e2e
ip=10.88.0.1
# Three: NATS runs a member on each (test/e2e/cluster/manifests/sluice). Node 1 is the control
# plane, which also holds one of them.
nodes=3
# node_ns N, node_name N, node_ip N: node N's network namespace, name and address.
node_ns() { if [ "$1" = 1 ]; then echo sluice-e2e; else echo "sluice-e2e-$1"; fi; }
node_name() { node_ns "$1"; }
node_ip() { echo "10.$((87 + $1)).0.1"; }
t0=$SECONDS
log() { echo "e2e up [$((SECONDS - t0))s]: $*" >&2; }
in_ns() { nsenter --net=/run/netns/$netns "$@"; }
[ "$(id -u)" = 0 ] || { echo "up.sh: needs root (network namespace, containerd, kubelet)" >&2; exit 1; }
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns-v1.11.3; do
  [ -x "$bin/$b" ] || { echo "up.sh: $bin/$b missing: run build.sh first" >&2; exit 1; }
done
for n in 1 2 3; do
  if ip netns list | awk '{print $1}' | grep -qx "$(node_ns $n)"; then
    echo "up.sh: network namespace $(node_ns $n) exists: run down.sh first" >&2
    exit 1
  fi
done

rm -rf "$state"
mkdir -p "$state"/{pki,logs,pids}
cd "$state"
# What is not ours, for down.sh: the pods' network namespaces there before.
ip netns list | awk '/^cni-/ {print $1}' >netns-before
# Each node's pods' cgroup, in every hierarchy (cgroup v1); a cpuset needs its CPUs and memory
# nodes.
for n in $(seq 1 "$nodes"); do
  cg=$(node_ns "$n")
  for c in /sys/fs/cgroup/*/; do
    [ -d "$c" ] && [ ! -L "${c%/}" ] && mkdir -p "$c/$cg"
  done
  if [ -d "/sys/fs/cgroup/cpuset/$cg" ]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$cg/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$cg/cpuset.mems"
  fi
done

# start_on N NAME CMD...: runs CMD inside node N's namespace in its own session, logging to
# logs/NAME.log; start NAME CMD... runs it on node 1.
start_on() {
  local n=$1 name=$2; shift 2
  # nsenter and setsid exec what follows: $! is the process itself.
  nsenter --net="/run/netns/$(node_ns "$n")" setsid "$@" >"logs/$name.log" 2>&1 </dev/null &
  echo $! >"pids/$name"
}
start() { start_on 1 "$@"; }
# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
  local what=$1 limit=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then
      echo "up.sh: $what not ready after ${limit}s; last log lines:" >&2
      tail -n 20 logs/*.log >&2 || true
      exit 1
    fi
    sleep 0.5
  done
  log "$what ready"
}

# --- the nodes' network namespaces and the links between them ---
echo "nameserver $ip" >resolv.conf
for n in $(seq 1 "$nodes"); do
  ns=$(node_ns "$n") nip=$(node_ip "$n")
  ip netns add "$ns"
  nsenter --net="/run/netns/$ns" sh -ec "
    ip link set lo up
    ip link add cni0 type bridge
    ip addr add $nip/16 dev cni0
    ip link set cni0 up
    # ClusterIPs need a route in a namespace with no default route.
    ip route add 10.96.0.0/16 dev cni0 src $nip
    sysctl -qw net.ipv4.ip_forward=1
    # Pod to Service to a pod on the same bridge: the bridge's traffic must pass iptables.
    sysctl -qw net.bridge.bridge-nf-call-iptables=1 || true"
  # What a pod's resolver has, for processes run with `ip netns exec` (the tests, and the
  # agents they start beside the cluster): the cluster DNS and its search path.
  mkdir -p "/etc/netns/$ns"
  printf 'nameserver %s\nsearch sluice.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n' $ip >"/etc/netns/$ns/resolv.conf"
  if [ "$n" != 1 ]; then
    # Node 1's end is nN (10.87.N.1), node N's uplink (10.87.N.2).
    ip link add "n$n" netns "$netns" type veth peer name uplink netns "$ns"
    in_ns ip addr add "10.87.$n.1/24" dev "n$n"
    in_ns ip link set "n$n" up
    in_ns ip route add "10.$((87 + n)).0.0/16" via "10.87.$n.2"
    nsenter --net="/run/netns/$ns" sh -ec "
      ip addr add 10.87.$n.2/24 dev uplink
      ip link set uplink up"
    for m in $(seq 1 "$nodes"); do
      [ "$m" = "$n" ] && continue
      nsenter --net="/run/netns/$ns" ip route add "10.$((87 + m)).0.0/16" via "10.87.$n.1" src "$nip"
    done
  fi
  log "node $n: namespace $ns, cni0 $nip/16"
done

# --- PKI and credentials: a CA, the API server's certificate, a service-account key pair,
# and one static token per component (the API server is reachable only inside the namespace).
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=sluice-e2e-ca" \
  -keyout pki/ca.key -out pki/ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
  -keyout pki/apiserver.key -out pki/apiserver.csr 2>/dev/null
printf "subjectAltName=IP:%s,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n" $ip >pki/ext.cnf
openssl x509 -req -in pki/apiserver.csr -CA pki/ca.crt -CAkey pki/ca.key -CAcreateserial \
  -days 30 -extfile pki/ext.cnf -out pki/apiserver.crt 2>/dev/null
openssl genrsa -out pki/sa.key 2048 2>/dev/null
openssl rsa -in pki/sa.key -pubout -out pki/sa.pub 2>/dev/null
: >pki/tokens.csv
chmod 600 pki/tokens.csv
# kubeconfig NAME USER GROUPS: a token for USER in GROUPS, and NAME.kubeconfig using it.
kubeconfig() {
  local tok
  tok=$(openssl rand -hex 24)
  echo "$tok,$2,$2,\"$3\"" >>pki/tokens.csv
  cat >"$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: sluice-e2e
  cluster: {server: "https://$ip:6443", certificate-authority: "$state/pki/ca.crt"}
users:
- name: $2
  user: {token: $tok}
contexts:
- name: sluice-e2e
  context: {cluster: sluice-e2e, user: $2}
current-context: sluice-e2e
KC
  chmod 600 "$1.kubeconfig"
}
kubeconfig admin admin system:masters
for n in $(seq 1 "$nodes"); do
  kubeconfig "kubelet-$n" "system:node:$(node_name "$n")" system:nodes
done
kubeconfig controller-manager system:kube-controller-manager ""
kubeconfig scheduler system:kube-scheduler ""
kubeconfig kube-proxy system:kube-proxy ""
kubeconfig coredns sluice-e2e:coredns ""
export KUBECONFIG=$state/admin.kubeconfig
kc() { in_ns "$bin/kubectl" "$@"; }

# --- etcd and the control plane ---
start etcd "$bin/etcd" --name default --data-dir "$state/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster default=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
wait_for etcd 30 in_ns curl -sf http://127.0.0.1:2379/health
start kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
  --bind-address 0.0.0.0 --advertise-address $ip --secure-port 6443 \
  --tls-cert-file pki/apiserver.crt --tls-private-key-file pki/apiserver.key --client-ca-file pki/ca.crt \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file pki/sa.pub --service-account-signing-key-file pki/sa.key \
  --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC \
  --token-auth-file pki/tokens.csv --anonymous-auth=false --allow-privileged=true \
  --kubelet-preferred-address-types InternalIP --profiling=false --v=1 \
  --default-not-ready-toleration-seconds 30 --default-unreachable-toleration-seconds 30
wait_for kube-apiserver 120 kc get --raw /readyz
start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig controller-manager.kubeconfig \
  --authentication-kubeconfig controller-manager.kubeconfig --authorization-kubeconfig controller-manager.kubeconfig \
  --service-account-private-key-file pki/sa.key --root-ca-file pki/ca.crt \
  --use-service-account-credentials --leader-elect=false --bind-address 127.0.0.1 \
  --cluster-cidr 10.88.0.0/14 --service-cluster-ip-range 10.96.0.0/16 --v=1
start kube-scheduler "$bin/kube-scheduler" --kubeconfig scheduler.kubeconfig \
  --authentication-kubeconfig scheduler.kubeconfig --authorization-kubeconfig scheduler.kubeconfig \
  --leader-elect=false --bind-address 127.0.0.1 --v=1

# --- CoreDNS, a process on the node's address: only cluster.local, nothing forwarded ---
kc apply -f - >/dev/null <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "sluice-e2e:coredns"}
rules:
- apiGroups: [""]
  resources: [services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "sluice-e2e:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "sluice-e2e:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "sluice-e2e:coredns"}
YAML
cat >Corefile <<CF
.:53 {
  bind $ip
  errors
  cache 5
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig $state/coredns.kubeconfig sluice-e2e
    pods insecure
  }
}
CF
start coredns "$bin/coredns-v1.11.3" -conf Corefile

# --- each node: containerd (Debian's, its own root, state and socket), the kubelet, kube-proxy ---
# node_up N: starts node N's containerd, imports the images into it, then its kubelet and
# kube-proxy. Node N's files are under nodes/N.
node_up() {
  local n=$1 name nip d sock cg
  name=$(node_name "$n") nip=$(node_ip "$n") d=$state/nodes/$n cg=/$(node_ns "$n")
  mkdir -p "$d"/{cni,containerd,kubelet}
  cat >"$d/cni/10-sluice-e2e.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "sluice-e2e", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$d/cni/ipam",
            "ranges": [[{"subnet": "10.$((87 + n)).0.0/16", "gateway": "$nip", "rangeStart": "10.$((87 + n)).1.0"}]]}}]}
CNI
  sock=$d/containerd/containerd.sock
  cat >"$d/containerd.toml" <<TOML
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "dev.local/pause:1"
  # Without it every sandbox fails (runc: can't get final child's PID): root here lacks
  # CAP_SYS_RESOURCE.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni"
TOML
  start_on "$n" "containerd-$n" containerd --config "$d/containerd.toml"
  wait_for "node $n's containerd" 30 ctr -a "$sock" version
  for t in "$cache"/images/*.tar; do
    ctr -a "$sock" -n k8s.io images import --no-unpack=false "$t" >/dev/null
  done
  log "node $n: images imported: $(ls "$cache"/images/*.tar | wc -l)"

  cat >"$d/kubelet.yaml" <<KCFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
# Every pod of this node under one cgroup of ours: down.sh kills exactly these.
cgroupRoot: $cg
containerRuntimeEndpoint: unix://$sock
failSwapOn: false
address: $nip
readOnlyPort: 0
# The kubelet's API is reachable only inside the namespaces; the API server's logs and exec
# calls come without a client certificate.
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
clusterDNS: [$ip]
clusterDomain: cluster.local
resolvConf: $state/resolv.conf
maxPods: 60
serializeImagePulls: false
# A shared disk: never evict or collect images for want of space.
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
KCFG
  start_on "$n" "kubelet-$n" "$bin/kubelet" --config "$d/kubelet.yaml" --kubeconfig "kubelet-$n.kubeconfig" \
    --hostname-override "$name" --node-ip "$nip" --root-dir "$d/kubelet" --v="${SLUICE_E2E_KUBELET_V:-1}"
  cat >"$d/kube-proxy.yaml" <<KP
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
# Every node's pods (10.88-10.90): traffic from them to a Service is not masqueraded.
clusterCIDR: 10.88.0.0/14
hostnameOverride: $name
clientConnection: {kubeconfig: $state/kube-proxy.kubeconfig}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
KP
  start_on "$n" "kube-proxy-$n" "$bin/kube-proxy" --config "$d/kube-proxy.yaml" --v=1
  wait_for "node $name" 120 kc wait --for condition=Ready --timeout 1s "node/$name"
}
# The nodes at once: most of each is importing its images.
node_pids=()
for n in $(seq 1 "$nodes"); do
  node_up "$n" & node_pids+=($!)
done
for p in "${node_pids[@]}"; do wait "$p" || { echo "up.sh: a node did not come up" >&2; exit 1; }; done
wait_for "cluster DNS" 60 ip netns exec $netns getent hosts kubernetes.default.svc.cluster.local
# Node 1 is the control plane (kubeadm's label and taint): the cluster's own services run there
# (Knative's, Traefik, and in the Sluice deployment S3 and the controllers), the functions and
# the trainers on the workers, nodes 2 and 3, which the multi-node scenarios lose.
kc label node "$node" node-role.kubernetes.io/control-plane= >/dev/null
kc taint node "$node" node-role.kubernetes.io/control-plane=:NoSchedule >/dev/null
on_control_plane='{"spec":{"template":{"spec":{"nodeSelector":{"node-role.kubernetes.io/control-plane":""},"tolerations":[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]}}}}'

# --- Knative Serving v0.42.2's core, from its module, with the images built here ---
bash "$here/knative.sh" "$state/knative"
kc apply --server-side -f "$state/knative-crds.yaml" >/dev/null
# Polled: kubectl wait fails, not waits, on a CRD that has no conditions yet;
# its timeout is for all of them together.
wait_for "Knative's CRDs" 60 kc wait --for condition=established --timeout 10s crd --all
kc apply --server-side -f "$state/knative.yaml" >/dev/null
kc -n knative-serving patch configmap config-network --type merge \
  -p '{"data":{"ingress-class":"traefik.ingress.networking.knative.dev"}}' >/dev/null
# Knative's feature flag for a Service's topologySpreadConstraints: the function's pods spread
# over the workers (test/e2e/cluster/manifests/sluice), so a node lost takes only some of them.
kc -n knative-serving patch configmap config-features --type merge \
  -p '{"data":{"kubernetes.podspec-topologyspreadconstraints":"enabled"}}' >/dev/null
kc apply --server-side -f "$here/manifests/traefik.yaml" >/dev/null
# rolled_out NS: every Deployment of NS has rolled out (onto the control plane).
rolled_out() {
  local d
  for d in $(kc -n "$1" get deployment -o name); do
    kc -n "$1" rollout status --timeout 10s "$d" || return 1
  done
}
for ns in knative-serving traefik; do
  for d in $(kc -n "$ns" get deployment -o name); do
    kc -n "$ns" patch "$d" --type merge -p "$on_control_plane" >/dev/null
  done
done
wait_for "Knative Serving" 240 rolled_out knative-serving
wait_for "Traefik" 120 rolled_out traefik

# Each node's local storage: a hostPath PersistentVolume bound to that node, in a default
# StorageClass that binds a claim only once its pod is scheduled (as local volumes do; there is
# no dynamic provisioner). NATS's StatefulSet claims one per member.
kc apply -f - >/dev/null <<'YAML'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
YAML
for n in $(seq 1 "$nodes"); do
  mkdir -p "$state/volumes/pv$n" && chmod 0777 "$state/volumes/pv$n"
  kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: sluice-e2e-pv$n}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  hostPath: {path: $state/volumes/pv$n, type: Directory}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$(node_name "$n")]}]
YAML
done

cat >env <<ENV
SLUICE_E2E_STATE=$state
SLUICE_E2E_NETNS=$netns
SLUICE_E2E_NODES=$nodes
KUBECONFIG=$state/admin.kubeconfig
SLUICE_E2E_BIN=$bin
SLUICE_E2E_IMAGE=dev.local/sluice:e2e
ENV
log "cluster up (kubectl: nsenter --net=/run/netns/$netns $bin/kubectl --kubeconfig $state/admin.kubeconfig)"
