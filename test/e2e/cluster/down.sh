#!/usr/bin/env bash
# Stops what up.sh started and nothing else: the pods' processes (every one under the cgroups
# /sluice-e2e and /sluice-e2e-N), the containerd shims serving this cluster's sockets, the
# processes recorded in pids/, the mounts under the state directory, the pods' network
# namespaces and the nodes' (sluice-e2e, sluice-e2e-2, sluice-e2e-3).
# Usage: down.sh [--keep-state]   (as root; safe to run when nothing is up)
set -uo pipefail
state=${SLUICE_E2E_STATE:-/var/lib/sluice-e2e}
nodes_ns="sluice-e2e sluice-e2e-2 sluice-e2e-3"
keep=false
[ "${1:-}" = --keep-state ] && keep=true

# The kubelets first, so that they do not start what is being killed.
for f in "$state"/pids/kubelet* "$state"/pids/kube-proxy*; do
  [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
done
# The pods: every process in the cgroups the kubelets put them in.
for round in 1 2 3; do
  pids=$(for ns in $nodes_ns; do
    find "/sys/fs/cgroup/pids/$ns" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u)
  [ -z "$pids" ] && break
  kill -KILL $pids 2>/dev/null
  sleep 0.5
done
# The shims of this cluster's containerds, then the processes up.sh started.
for sock in "$state"/containerd/containerd.sock "$state"/nodes/*/containerd/containerd.sock; do
  for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
done
for f in "$state"/pids/*; do
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  kill -TERM "$pid" 2>/dev/null
done
for i in $(seq 1 20); do
  alive=false
  for f in "$state"/pids/*; do [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=true; done
  $alive || break
  sleep 0.5
done
for f in "$state"/pids/*; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
rm -f "$state"/pids/*

# Mounts under the state directory (overlays, tmpfs volumes, pod netns files), deepest first.
if [ -d "$state" ]; then
  awk -v s="$state" '$2 ~ "^"s {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null
  done
fi
# The pods' network namespaces: containerd names them cni-<uuid>; ours are those that were
# not there when up.sh started.
if [ -f "$state/netns-before" ]; then
  for ns in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do
    grep -qx "$ns" "$state/netns-before" || ip netns del "$ns" 2>/dev/null
  done
fi
for ns in $nodes_ns; do
  ip netns del "$ns" 2>/dev/null
  rm -rf "/etc/netns/$ns"
  # The empty cgroups the kubelet made.
  for c in /sys/fs/cgroup/*/"$ns"; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
done
$keep || rm -rf "$state"
exit 0
