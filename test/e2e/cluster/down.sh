#!/usr/bin/env bash
# Stops what up.sh started and nothing else: the pods' processes (every one under the cgroup
# /sluice-e2e), the containerd shims serving this cluster's socket, the processes recorded in
# pids/, the mounts under the state directory, the pods' network namespaces and sluice-e2e.
# Usage: down.sh [--keep-state]   (as root; safe to run when nothing is up)
set -uo pipefail
state=${SLUICE_E2E_STATE:-/var/lib/sluice-e2e}
netns=sluice-e2e
keep=false
[ "${1:-}" = --keep-state ] && keep=true

# The kubelet first, so that it does not start what is being killed.
for name in kubelet kube-proxy; do
  [ -f "$state/pids/$name" ] && kill -TERM "$(cat "$state/pids/$name")" 2>/dev/null
done
# The pods: every process in the cgroup the kubelet put them in.
for round in 1 2 3; do
  pids=$(cat /sys/fs/cgroup/pids/sluice-e2e/cgroup.procs /sys/fs/cgroup/pids/sluice-e2e/*/cgroup.procs \
    $(find /sys/fs/cgroup/pids/sluice-e2e -name cgroup.procs 2>/dev/null) 2>/dev/null | sort -u)
  [ -z "$pids" ] && break
  kill -KILL $pids 2>/dev/null
  sleep 0.5
done
# The shims of this cluster's containerd, then the processes up.sh started.
sock=$state/containerd/containerd.sock
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
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
ip netns del $netns 2>/dev/null
rm -rf /etc/netns/$netns
# The empty cgroups the kubelet made.
for c in /sys/fs/cgroup/*/sluice-e2e; do
  [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
done
$keep || rm -rf "$state"
exit 0
