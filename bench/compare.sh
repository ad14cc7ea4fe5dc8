#!/bin/sh
# Side-by-side, single-core throughput of imagenet-train: torchvision
# (PIL + libjpeg-turbo, one thread) against `sluice bench ops` in the
# pure-Go build and in the -tags turbojpeg build, on the same JPEGs, each
# pinned to the same CPU. Prints each run's samples/s and the ratios.
#
# Usage: bench/compare.sh [WORKDIR]
# Environment: SAMPLES (400) images, RUN_SECONDS (10) per run, CPU (1) to pin
# to, ROUNDS (2) repetitions of the three runs, PYTHON (/usr/bin/python3,
# which must have python3-torchvision), TASKSET ("taskset -c $CPU"; set it
# empty where taskset is missing).
set -eu
cd "$(dirname "$0")/.."
SAMPLES=${SAMPLES:-400}
SECONDS_PER_RUN=${RUN_SECONDS:-10}
CPU=${CPU:-1}
ROUNDS=${ROUNDS:-2}
PYTHON=${PYTHON:-/usr/bin/python3}
TASKSET=${TASKSET-taskset -c $CPU}
work=${1:-$(mktemp -d /tmp/sluice-bench.XXXXXX)}
mkdir -p "$work"

echo "== generating $SAMPLES ImageNet-like JPEGs (300-800 px, quality 90) in $work/imgs"
go run ./bench/genimages --out "$work/imgs" --tar "$work/shard.tar" --samples "$SAMPLES"
echo "== building sluice (pure Go) and sluice (-tags turbojpeg)"
go build -o "$work/sluice-go" ./cmd/sluice
CGO_ENABLED=1 go build -tags turbojpeg -o "$work/sluice-turbo" ./cmd/sluice

echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs, pinned to CPU $CPU"
round=1
while [ "$round" -le "$ROUNDS" ]; do
	echo "== round $round: torchvision, sluice (go), sluice (turbojpeg), ${SECONDS_PER_RUN}s each"
	OMP_NUM_THREADS=1 $TASKSET "$PYTHON" bench/torchvision_bench.py "$work/imgs" --seconds "$SECONDS_PER_RUN" >"$work/torchvision-$round.json"
	$TASKSET "$work/sluice-go" bench ops --pipeline imagenet-train --input "$work/imgs" --seconds "$SECONDS_PER_RUN" --json >"$work/go-$round.json"
	$TASKSET "$work/sluice-turbo" bench ops --pipeline imagenet-train --input "$work/imgs" --seconds "$SECONDS_PER_RUN" --json >"$work/turbo-$round.json"
	"$PYTHON" - "$work" "$round" <<'PY'
import json, sys
work, rnd = sys.argv[1], sys.argv[2]
tv, go, tj = (json.load(open(f"{work}/{n}-{rnd}.json")) for n in ("torchvision", "go", "turbo"))
t = tv["samples_per_s_per_core"]
for label, r in (("torchvision (PIL, 1 thread)", tv), ("sluice, pure Go", go), ("sluice, turbojpeg", tj)):
    print(f"  {label:30s} {r['samples_per_s_per_core']:8.1f} samples/s")
print(f"  ratio turbojpeg / torchvision: {tj['samples_per_s_per_core'] / t:.2f}x (target >= 2.0)")
print(f"  ratio pure Go / torchvision:   {go['samples_per_s_per_core'] / t:.2f}x (target >= 0.5)")
PY
	round=$((round + 1))
done
echo "== JSON reports in $work"
